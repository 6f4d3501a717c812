"""`Informer`: a list+watch cache of one collection, so that readers never poll.

A background thread holds one long-lived watch and hands every event to the asyncio loop,
which alone mutates the cache, stamps each new resourceVersion with the injected clock's
`monotonic()` (the moment *this process* saw it: what Lease expiry is measured from), and
wakes subscribers and `wait_for` callers. The thread reconnects with backoff after errors,
resumes from the last resourceVersion it saw (bookmarks included), and relists after 410
Gone, emitting the MODIFIED/DELETED events the relist implies.

What it does not promise: to deliver every intermediate version of an object (after a relist
only the newest is seen), or any order between different objects.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from leasecron._logs import get_logger
from leasecron.kube import _diffs
from leasecron.kube._diffs import Key, object_key, resource_version
from leasecron.kube.clients import Kube, WatchStream
from leasecron.kube.errors import Gone, KubeError
from leasecron.models.clocks import SYSTEM_CLOCK, Clock

_log = get_logger("leasecron.kube.watches")
_PAGE_SIZE = 500


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by an Informer. `type` is ADDED, MODIFIED, DELETED, or SYNCED (the
    cache matches a fresh list; `obj` is then empty). `observed_at` is the loop clock's
    monotonic time when the event was applied."""

    type: str
    obj: dict[str, Any] = field(repr=False)
    observed_at: float


def backoff_delays(*, first: float = 0.1, cap: float = 3.0) -> Iterator[float]:
    """Exponential backoff with jitter: about 0.1 s, 0.2 s, 0.4 s ... up to `cap`."""
    delay = first
    while True:
        yield random.uniform(delay / 2, delay)
        delay = min(cap, delay * 2)


class Informer:
    """list+watch cache of one collection (optionally label/field-selected), fed by a watch
    stream in a background thread and delivered into the asyncio loop.

    While the stream is healthy it sends no requests other than the single long-lived watch
    (re-opened when the server ends it, every ~5 minutes).
    """

    def __init__(
        self,
        kube: Kube,
        *,
        path: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._kube = kube
        self.path = path
        self._selectors = {
            k: v
            for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if v
        }
        self._clock = clock
        self._objects: dict[Key, dict[str, Any]] = {}
        self._observed: dict[Key, float] = {}
        self._subscribers: list[Callable[[WatchEvent], None]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: WatchStream | None = None
        self._version: str | None = None  # where the watch resumes; None: relist first
        self.healthy = False
        self.relists = 0

    # --- reading the cache (loop thread) -------------------------------------------------

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._objects.get((namespace, name))

    def observed_at(self, namespace: str | None, name: str) -> float | None:
        """Monotonic time this process first saw the object's current resourceVersion."""
        return self._observed.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
        return list(self._objects.values())

    def subscribe(self, callback: Callable[[WatchEvent], None]) -> Callable[[], None]:
        """Call `callback` in the loop thread for every event; returns the unsubscribe.
        An exception in a callback is logged and does not stop the informer."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    async def wait_for(self, predicate: Callable[[], bool], *, timeout: float | None) -> bool:  # noqa: ASYNC109
        """Wait until `predicate()` is true, re-checking after every event and health change;
        False when `timeout` seconds pass first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not predicate():
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait([waiter], timeout=remaining)
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return True

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """List once (raising its KubeError, leaving nothing running, if that fails), fill the
        cache, then start watching in the background. Returns once the cache is synced."""
        if self._thread is not None:
            raise RuntimeError("Informer already started")
        self._loop = asyncio.get_running_loop()
        items, version = await asyncio.to_thread(self._list)
        self._apply_list(items)
        self._set_healthy(True)
        self._thread = threading.Thread(
            target=self._run, args=(version,), name=f"leasecron-watch {self.path}", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Close the stream and wait (bounded) for the background thread to end."""
        self._stopping.set()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, self._kube.request_timeout + 5.0)
        self._set_healthy(False)

    # --- background thread -------------------------------------------------------------

    def _list(self) -> tuple[list[dict[str, Any]], str]:
        """All items (paged) and the list's resourceVersion; blocking."""
        items: list[dict[str, Any]] = []
        query = {**self._selectors, "limit": str(_PAGE_SIZE)}
        while True:
            page = self._kube.request_sync("GET", self.path, query=query)
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion") or "")
            query = {**query, "continue": str(token)}

    def _run(self, version: str) -> None:
        """The watch thread: watch, reconnect with backoff after errors, relist after 410."""
        self._version = version
        delays = backoff_delays()
        while not self._stopping.is_set():
            opened = time.monotonic()
            try:
                if self._version is None:
                    items, self._version = self._list()
                    self._post(self._relisted, items)
                delivered = self._watch(self._version)
                if delivered or time.monotonic() - opened > 1.0:
                    delays = backoff_delays()
                else:  # ended at once without news: do not spin on a misbehaving server
                    self._stopping.wait(next(delays))
            except Gone as e:
                _log.info("watch expired, relisting", path=self.path, error=e.message)
                self._version = None
                if time.monotonic() - opened < 1.0:
                    self._stopping.wait(next(delays))
            except KubeError as e:
                if self._stopping.is_set():
                    break
                self._post(self._set_healthy, False)
                delay = next(delays)
                _log.warning("watch failed", path=self.path, error=repr(e), retry_in=delay)
                self._stopping.wait(delay)

    def _watch(self, version: str) -> int:
        """One watch from `version` until the server ends it, advancing `self._version` with
        every event and bookmark; the number of object events delivered. Raises Gone when
        `version` is too old, other KubeErrors when the connection fails."""
        query = {
            **self._selectors,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": version,
            "timeoutSeconds": str(random.randint(240, 360)),
        }
        stream = self._kube.stream_lines(self.path, query=query)
        with self._stream_lock:
            self._stream = stream
            if self._stopping.is_set():
                stream.close()
        self._post(self._set_healthy, True)
        delivered = 0
        try:
            for line in stream:
                kind, obj = _diffs.parse_watch_line(line)
                self._version = resource_version(obj) or self._version
                if kind != _diffs.BOOKMARK:
                    self._post(self._apply, kind, obj)
                    delivered += 1
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
        return delivered

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stopping.set()
            return
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed between the check and the call
            self._stopping.set()

    # --- applying changes (loop thread) ------------------------------------------------

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        now = self._clock.monotonic()
        if kind == _diffs.DELETED:
            if self._objects.pop(key, None) is None:
                return
            self._observed.pop(key, None)
        else:
            previous = self._objects.get(key)
            if previous is not None and resource_version(previous) == resource_version(obj):
                return
            self._objects[key] = obj
            self._observed[key] = now
        self._emit(WatchEvent(type=kind, obj=obj, observed_at=now))

    def _apply_list(self, items: list[dict[str, Any]]) -> None:
        for kind, obj in _diffs.relist_events(self._objects, items):
            self._apply(kind, obj)
        self._emit(WatchEvent(type=_diffs.SYNCED, obj={}, observed_at=self._clock.monotonic()))

    def _relisted(self, items: list[dict[str, Any]]) -> None:
        self.relists += 1
        self._apply_list(items)

    def _set_healthy(self, healthy: bool) -> None:
        if self.healthy != healthy:
            self.healthy = healthy
            self._wake()

    def _emit(self, event: WatchEvent) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:
                _log.exception("informer subscriber failed", path=self.path, kind=event.type)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
