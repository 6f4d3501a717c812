"""Informer freshness against the real API server: a watch that goes quiet behind a blackholed
path is noticed (unhealthy) and catches up once the path heals; a watch thread that raises
something unexpected is logged, marked unhealthy, restarted, and sees later changes."""

from __future__ import annotations

import asyncio
import copy
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
import structlog
from kubernetes.client import ApiClient

from leasecron.kube import _diffs
from leasecron.kube.clients import Kube
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer

pytestmark = pytest.mark.integration
T = TypeVar("T")
DEADLINE = 20.0
QUIET = 2.0  # the informers' max_quiet here: the smallest allowed, so the test stays short
LONGER_QUIET = 6.0  # long enough that a pause lands in an open watch, not between two


class PausableRelay:
    """A loopback TCP relay to the API server. `pause()` makes it a blackhole: every connection
    stays open, new ones are accepted, and no byte goes through in either direction until
    `resume()` (the bytes held meanwhile are then delivered)."""

    def __init__(self, *, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._listener.close()
        with self._guard:
            for sock in self._sockets:
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self._upstream)
            except OSError:
                return
            with self._guard:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()  # paused: hold the bytes, keep the connection open
                if self._closed:
                    return
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def relay(kube_api: ApiClient) -> Iterator[PausableRelay]:
    server = urlsplit(kube_api.configuration.host)
    made = PausableRelay(upstream=(server.hostname or "127.0.0.1", server.port or 443))
    yield made
    made.close()


def through(api: ApiClient, relay: PausableRelay) -> ApiClient:
    """An ApiClient like `api` whose connections go through `relay` (the serving certificate
    names 127.0.0.1, whatever the port)."""
    config = copy.deepcopy(api.configuration)
    config.host = f"https://127.0.0.1:{relay.port}"
    return ApiClient(config)


def lease(name: str, holder: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": holder}}


def holder_is(informer: Informer, namespace: str, name: str, holder: str) -> Callable[[], bool]:
    def check() -> bool:
        obj = informer.get(namespace, name)
        return obj is not None and obj["spec"].get("holderIdentity") == holder

    return check


async def set_holder(store: LeaseStore, namespace: str, name: str, holder: str) -> None:
    current = await store.get(namespace=namespace, name=name)
    assert current is not None
    current["spec"]["holderIdentity"] = holder
    await store.replace(namespace=namespace, body=current)


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


def test_a_watch_gone_quiet_behind_a_blackhole_is_unhealthy_and_catches_up_when_it_heals(
    kube_api: ApiClient, namespace: str, relay: PausableRelay
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        direct = LeaseStore(Kube(kube_api, max_workers=2))
        relayed_api = through(kube_api, relay)
        kube = Kube(relayed_api, max_workers=2, request_timeout=3.0)
        path = direct.collection_path(namespace=namespace)
        informer = Informer(kube, path=path, max_quiet=LONGER_QUIET)  # watches of 3-5 s
        await informer.start()
        try:
            with structlog.testing.capture_logs() as logs:
                await direct.create(namespace=namespace, body=lease("job", "a"))
                seen = holder_is(informer, namespace, "job", "a")
                assert await informer.wait_for(seen, timeout=DEADLINE)
                relay.pause()  # just after an event came in: mid-stream
                assert informer.healthy
                assert await informer.wait_for(lambda: not informer.healthy, timeout=DEADLINE)
                assert informer.staleness() > LONGER_QUIET
                await set_holder(direct, namespace, "job", "b")  # it cannot hear of this yet
                assert seen()
                relay.resume()
                caught_up = holder_is(informer, namespace, "job", "b")
                assert await informer.wait_for(
                    lambda: caught_up() and informer.healthy, timeout=DEADLINE
                )
            assert informer.staleness() <= LONGER_QUIET
        finally:
            relay.resume()
            await informer.stop()
            relayed_api.close()
        return logs

    logs = run(scenario)
    quiet = [e for e in logs if e["event"] == "watch quiet beyond the bound, reconnecting"]
    assert quiet and quiet[0]["quiet_s"] > LONGER_QUIET


def test_an_unexpected_exception_in_the_watch_thread_is_logged_and_the_watch_restarts(
    kube_api: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed, raised, released = threading.Event(), threading.Event(), threading.Event()
    parse = _diffs.parse_watch_line
    list_items = Informer._list

    def parse_or_raise_once(line: bytes) -> Any:
        if armed.is_set() and not raised.is_set():
            raised.set()
            raise RuntimeError("injected fault in the watch thread")
        return parse(line)

    def list_held_after_the_fault(self: Informer) -> Any:
        if raised.is_set():  # hold the restart until the test has seen the informer unhealthy
            released.wait(DEADLINE)
        return list_items(self)

    monkeypatch.setattr(_diffs, "parse_watch_line", parse_or_raise_once)
    monkeypatch.setattr(Informer, "_list", list_held_after_the_fault)

    async def scenario() -> list[dict[str, Any]]:
        store = LeaseStore(Kube(kube_api, max_workers=4))
        informer = Informer(store.kube, path=store.collection_path(namespace=namespace))
        await informer.start()
        try:
            with structlog.testing.capture_logs() as logs:
                armed.set()
                await store.create(namespace=namespace, body=lease("job", "a"))
                assert await informer.wait_for(lambda: not informer.healthy, timeout=DEADLINE)
                await set_holder(store, namespace, "job", "b")  # while the thread is down
                released.set()
                restarted = holder_is(informer, namespace, "job", "b")
                assert await informer.wait_for(
                    lambda: restarted() and informer.healthy, timeout=DEADLINE
                )
            await set_holder(store, namespace, "job", "c")
            assert await informer.wait_for(
                holder_is(informer, namespace, "job", "c"), timeout=DEADLINE
            )
            assert informer.restarts == 1
        finally:
            released.set()
            await informer.stop()
        return logs

    logs = run(scenario)
    failures = [e for e in logs if e["event"] == "watch thread failed, restarting it"]
    assert len(failures) == 1
    assert failures[0]["log_level"] == "error" and failures[0].get("exc_info")


def test_a_watch_thread_that_is_gone_is_replaced_by_the_supervisor(
    kube_api: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_watch = Informer._run
    threads: list[str] = []

    def gone_the_first_time(self: Informer, *args: Any) -> None:
        threads.append(threading.current_thread().name)
        if len(threads) > 1:
            run_watch(self, *args)
        # the first thread just ends, as one killed by something no handler saw would

    monkeypatch.setattr(Informer, "_run", gone_the_first_time)

    async def scenario() -> None:
        store = LeaseStore(Kube(kube_api, max_workers=4))
        path = store.collection_path(namespace=namespace)
        informer = Informer(store.kube, path=path, max_quiet=QUIET)
        await informer.start()
        try:
            with structlog.testing.capture_logs() as logs:
                assert await informer.wait_for(lambda: informer.restarts == 1, timeout=DEADLINE)
            assert [e["verdict"] for e in logs if e["event"] == "watch thread replaced"] == ["dead"]
            await store.create(namespace=namespace, body=lease("job", "a"))
            assert await informer.wait_for(
                holder_is(informer, namespace, "job", "a"), timeout=DEADLINE
            )
            assert informer.healthy
        finally:
            await informer.stop()

    run(scenario)
    assert len(threads) == 2
