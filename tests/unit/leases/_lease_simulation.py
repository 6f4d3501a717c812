"""Simulated time and an in-memory Lease store for unit tests of the coordination loops.

`simulate(clock, main)` runs `main()` on an event loop whose time is a FakeClock: whenever
the loop would wait for its next timer, the clock jumps there, so tests run in no real time
and assert on simulated seconds. `FakeLeaseServer` applies writes conditionally on
resourceVersion as the API server does, can be taken `down` (Unavailable), and feeds
`FakeCache`s (the Informer's reading side) one loop iteration after each write, or `delay`
seconds after it. With `latency`, each request and each reply take that long.
"""

from __future__ import annotations

import asyncio
import copy
import selectors
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from leasecron.kube.errors import AlreadyExists, Conflict, NotFound, Unavailable
from leasecron.kube.watches import WatchEvent
from leasecron.models.clocks import FakeClock

T = TypeVar("T")
Key = tuple[str, str]


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready: list[Any] = super().select(0)
        if ready:
            return ready
        if timeout is None:
            raise RuntimeError("the simulation would wait forever: nothing is scheduled")
        if timeout > 0:
            self._clock.advance(timeout)
        return []


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(_JumpingSelector(clock))
        self._fake_clock = clock

    def time(self) -> float:
        return self._fake_clock.monotonic()


def simulate(clock: FakeClock, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    loop = _VirtualTimeLoop(clock)
    try:
        return loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _key(body: dict[str, Any], namespace: str) -> Key:
    return (namespace, str(body["metadata"]["name"]))


class FakeCache:
    """What an Informer offers a LeaseView, fed by the fake server."""

    def __init__(self, clock: FakeClock, *, delay: float = 0.0) -> None:
        self._clock = clock
        self.delay = delay
        """Seconds after a write that this cache sees it (in write order)."""
        self.objects: dict[Key, dict[str, Any]] = {}
        self._observed: dict[Key, float] = {}
        self._subscribers: list[Callable[[WatchEvent], None]] = []
        self.connected = True

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace or "", name))

    def observed_at(self, namespace: str | None, name: str) -> float | None:
        return self._observed.get((namespace or "", name))

    def subscribe(self, callback: Callable[[WatchEvent], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def deliver(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        if not self.connected:
            return
        self.objects[key] = obj
        self._observed[key] = self._clock.monotonic()
        for callback in list(self._subscribers):
            callback(WatchEvent(type=kind, obj=obj, observed_at=self._clock.monotonic()))


class FakeLeaseServer:
    """Leases in memory with the API server's conditional-write rules."""

    def __init__(self, clock: FakeClock, *, latency: Callable[[], float] | None = None) -> None:
        self.clock = clock
        self.latency = latency
        """Seconds a request takes to reach the store, and again for its reply (None: none)."""
        self.objects: dict[Key, dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.caches: list[FakeCache] = []
        self.writes: list[tuple[float, str, dict[str, Any]]] = []

    def cache(self, *, delay: float = 0.0) -> FakeCache:
        cache = FakeCache(self.clock, delay=delay)
        for key, obj in self.objects.items():
            cache.deliver("ADDED", key, obj)
        self.caches.append(cache)
        return cache

    def client(self, name: str) -> FakeClient:
        return FakeClient(self, name)

    def stored(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def _check(self) -> None:
        if self.down:
            raise Unavailable("connection refused", reason="Unreachable")

    def _store(self, kind: str, key: Key, body: dict[str, Any], client: str) -> dict[str, Any]:
        self.version += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = key[0]
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = obj
        self.writes.append((self.clock.monotonic(), client, obj))
        loop = asyncio.get_running_loop()
        for cache in self.caches:
            if cache.delay > 0:
                loop.call_later(cache.delay, cache.deliver, kind, key, copy.deepcopy(obj))
            else:
                loop.call_soon(cache.deliver, kind, key, copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        obj = self.objects.get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def create(self, namespace: str, body: dict[str, Any], client: str) -> dict[str, Any]:
        self._check()
        key = _key(body, namespace)
        if key in self.objects:
            raise AlreadyExists("exists", status=409, reason="AlreadyExists")
        return self._store("ADDED", key, body, client)

    def replace(self, namespace: str, body: dict[str, Any], client: str) -> dict[str, Any]:
        self._check()
        key = _key(body, namespace)
        current = self.objects.get(key)
        if current is None:
            raise NotFound("not found", status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict("stale resourceVersion", status=409)
        return self._store("MODIFIED", key, body, client)


class FakeClient:
    """One replica's connection: the LeaseStore interface, with request counts."""

    def __init__(self, server: FakeLeaseServer, name: str) -> None:
        self.server = server
        self.name = name
        self.requests: Counter[str] = Counter()

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())

    async def _travel(self) -> None:
        if self.server.latency is not None:
            await asyncio.sleep(self.server.latency())

    async def get(
        self,
        *,
        namespace: str,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any] | None:
        self.requests["get"] += 1
        await self._travel()
        answer = self.server.get(namespace, name)
        await self._travel()
        return answer

    async def create(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        self.requests["create"] += 1
        await self._travel()
        answer = self.server.create(namespace, body, self.name)
        await self._travel()
        return answer

    async def replace(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        self.requests["replace"] += 1
        await self._travel()
        answer = self.server.replace(namespace, body, self.name)
        await self._travel()
        return answer
