"""`Informer`: a list+watch cache of one collection, so that readers never poll.

A background thread holds one long-lived watch and hands every event to the asyncio loop,
which alone mutates the cache, stamps each new resourceVersion with the injected clock's
`monotonic()` (the moment *this process* saw it: what Lease expiry is measured from), and
wakes subscribers and `wait_for` callers. The thread reconnects with backoff after errors,
resumes from the last resourceVersion it saw (bookmarks included), and relists after 410
Gone, emitting the MODIFIED/DELETED events the relist implies.

Bounded staleness (docs/watches.md): each watch asks for bookmarks and a timeoutSeconds of
65-85 % of `max_quiet` (90 s by default), so a healthy server speaks within `max_quiet`. A
supervisor task closes a stream quiet beyond it (a blackholed path: connection open, no bytes)
so that the thread re-opens it, and replaces a watch thread that is gone or blocked in one
request beyond it. `healthy` is False while the watch is down or quiet beyond the bound. An
unexpected exception in the thread is logged with its traceback; the thread relists and goes on.

What it does not promise: to deliver every intermediate version of an object (after a relist
only the newest is seen), any order between different objects, or a cache fresher than
`max_quiet` (plus one supervisor period) when `healthy` is read.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from leasecron._logs import get_logger
from leasecron._metrics import WATCH_EVENTS
from leasecron.kube import _diffs
from leasecron.kube import _freshness as fresh
from leasecron.kube._caches import ObjectCache, Transform, WatchEvent, wait_until
from leasecron.kube._diffs import resource_version
from leasecron.kube._paths import describe
from leasecron.kube.clients import Kube, WatchStream
from leasecron.kube.errors import Gone, KubeError
from leasecron.models.clocks import SYSTEM_CLOCK, Clock

__all__ = ["Informer", "WatchEvent", "backoff_delays", "wait_until"]

_log = get_logger("leasecron.kube.watches")
_PAGE_SIZE = 500


def backoff_delays(*, first: float = 0.1, cap: float = 3.0) -> Iterator[float]:
    """Exponential backoff with jitter: about 0.1 s, 0.2 s, 0.4 s ... up to `cap`."""
    delay = first
    while True:
        yield random.uniform(delay / 2, delay)
        delay = min(cap, delay * 2)


class _WatchState:
    """What the watch thread and the supervisor share, under one lock: the current thread's
    generation, its open stream, since when it is blocked in a list or open, where the watch
    resumes and when the server last spoke. A thread changes them only while its generation
    is current: a replaced thread can no longer post, resume or mark the server heard."""

    def __init__(self, clock: Clock) -> None:
        self.lock = threading.Lock()
        self._clock = clock
        self.generation = 0
        self.stream: WatchStream | None = None
        self.blocked_since: float | None = None  # the thread's list/open began (clock time)
        self.version: str | None = None  # where the watch resumes; None: relist first
        self.last_heard: float | None = None

    def renew(self) -> int:
        """Start a new generation (abandoning the thread of the previous one); its number."""
        with self.lock:
            self.generation += 1
            self.blocked_since = None
            return self.generation

    def current(self, generation: int) -> bool:
        return self.generation == generation

    def blocking(self, generation: int) -> None:
        """The thread of `generation` enters a list or the open of a watch."""
        with self.lock:
            if self.generation == generation:
                self.blocked_since = self._clock.monotonic()

    def unblocked(self, generation: int) -> None:
        with self.lock:
            if self.generation == generation:
                self.blocked_since = None

    def heard(self, generation: int) -> None:
        with self.lock:
            if self.generation == generation:
                self.last_heard = self._clock.monotonic()

    def resume_from(self, generation: int, version: str | None) -> None:
        with self.lock:
            if self.generation == generation:
                self.version = version

    def adopt(self, generation: int, stream: WatchStream, stopping: threading.Event) -> bool:
        """Make `stream` the open one, unless `generation` was replaced or a stop was asked
        (False: the caller closes it)."""
        with self.lock:
            current = self.generation == generation and not stopping.is_set()
            if current:
                self.stream, self.blocked_since = stream, None
        return current

    def take_stream(self) -> WatchStream | None:
        """The open stream, no longer the open one (for the caller to close)."""
        with self.lock:
            stream, self.stream = self.stream, None
        return stream

    def drop(self, stream: WatchStream) -> bool:
        """Forget `stream` if it is still the open one: True when nobody took it (the server
        ended it)."""
        with self.lock:
            ours = self.stream is stream
            if ours:
                self.stream = None
        return ours

    def looks(self) -> tuple[bool, float | None]:
        """(whether a stream is open, since when the thread is blocked in a list or open)."""
        with self.lock:
            return self.stream is not None, self.blocked_since


class Informer(ObjectCache):
    """list+watch cache of one collection (optionally label/field-selected), fed by a watch
    stream in a background thread and delivered into the asyncio loop.

    While the stream is healthy it sends no requests other than the single long-lived watch,
    re-opened when the server ends it (every 0.65-0.85 x `max_quiet` seconds).
    """

    def __init__(
        self,
        kube: Kube,
        *,
        path: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        max_quiet: float = fresh.DEFAULT_MAX_QUIET,
        transform: Transform | None = None,
    ) -> None:
        super().__init__(path=path, clock=clock, transform=transform)
        self._kube = kube
        self._selectors = {
            k: v
            for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if v
        }
        self.max_quiet = fresh.check_max_quiet(max_quiet)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        self._state = _WatchState(clock)
        self._connected = False
        self._reported_healthy = False
        self.relists = 0
        self.restarts = 0
        """Watch threads restarted after an unexpected exception, or replaced when gone or
        stuck; each is logged."""

    # --- reading the cache (loop thread) -------------------------------------------------

    @property
    def last_heard(self) -> float | None:
        """The clock's monotonic time the server last spoke: an event, a bookmark, a watch
        opened or ended by the server, a list. None before start."""
        return self._state.last_heard

    @last_heard.setter
    def last_heard(self, when: float | None) -> None:
        self._state.last_heard = when

    @property
    def healthy(self) -> bool:
        """True while the watch is up and the server was heard within `max_quiet`: only then
        may the cache be taken as current (up to `max_quiet`)."""
        return self._connected and self.staleness() <= self.max_quiet

    def staleness(self) -> float:
        """Seconds since the server last spoke (infinite before the first list)."""
        heard = self.last_heard
        return math.inf if heard is None else max(0.0, self._clock.monotonic() - heard)

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """List once (raising its KubeError, leaving nothing running, if that fails), fill the
        cache, then start watching in the background. Returns once the cache is synced."""
        if self._thread is not None:
            raise RuntimeError("Informer already started")
        self._loop = asyncio.get_running_loop()
        items, version = await asyncio.to_thread(self._list)
        self.last_heard = self._clock.monotonic()
        self._apply_list(items)
        self._state.version = version
        self._set_connected(True)
        self._spawn()
        self._supervisor = self._loop.create_task(self._supervise(), name=f"supervise {self.path}")

    async def stop(self) -> None:
        """Close the stream and wait (bounded) for the background thread to end."""
        self._stopping.set()
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.wait([supervisor])
        stream = self._state.take_stream()
        if stream is not None:
            stream.close()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, self._kube.request_timeout + 5.0)
        self._set_connected(False)

    # --- supervision (loop thread) -----------------------------------------------------

    def _spawn(self) -> None:
        """Start a watch thread of a new generation; any previous one is abandoned."""
        generation = self._state.renew()
        self._thread = threading.Thread(
            target=self._run, args=(generation,), name=f"leasecron-watch {self.path}", daemon=True
        )
        self._thread.start()

    async def _supervise(self) -> None:
        period = fresh.supervision_period(self.max_quiet)
        restart_delays = backoff_delays(first=period, cap=max(period, 30.0))
        not_before = 0.0
        while not self._stopping.is_set():
            await asyncio.sleep(period)
            try:
                now = self._clock.monotonic()
                verdict = self._judge(now)
                if verdict is fresh.Verdict.QUIET:
                    self._close_quiet_stream()
                elif verdict in (fresh.Verdict.DEAD, fresh.Verdict.STUCK) and now >= not_before:
                    self.restarts += 1
                    _log.error("watch thread replaced", path=self.path, verdict=str(verdict))
                    self._set_connected(False)
                    not_before = now + next(restart_delays)
                    self._spawn()
                elif verdict is fresh.Verdict.FRESH:
                    restart_delays = backoff_delays(first=period, cap=max(period, 30.0))
                self._report_health()
            except Exception:  # the supervisor itself must outlive anything it runs into
                _log.exception("informer supervisor failed", path=self.path)

    def _judge(self, now: float) -> fresh.Verdict:
        thread = self._thread
        streaming, blocked_since = self._state.looks()
        return fresh.judge(
            now=now,
            last_heard=self.last_heard if self.last_heard is not None else now,
            max_quiet=self.max_quiet,
            alive=thread is not None and thread.is_alive(),
            streaming=streaming,
            blocked_since=blocked_since,
        )

    def _close_quiet_stream(self) -> None:
        stream = self._state.take_stream()
        if stream is not None:
            _log.warning(
                "watch quiet beyond the bound, reconnecting",
                path=self.path,
                quiet_s=round(self.staleness(), 1),
                max_quiet_s=self.max_quiet,
            )
            self._set_connected(False)
            stream.close()

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

    def _run(self, generation: int) -> None:
        """The watch thread: watch, reconnect with backoff after errors, relist after 410 and
        after an unexpected exception (logged with its traceback). Ends when stopped or when
        a newer generation has replaced it."""
        delays = backoff_delays()
        state = self._state
        while not self._stopping.is_set() and state.current(generation):
            opened = time.monotonic()
            try:
                if state.version is None and not self._relist(generation):
                    continue
                delivered = self._watch(generation, state.version or "")
                if delivered or time.monotonic() - opened > 1.0:
                    delays = backoff_delays()
                else:  # ended at once without news: do not spin on a misbehaving server
                    self._stopping.wait(next(delays))
            except Gone as e:
                _log.info("watch expired, relisting", path=self.path, error=e.message)
                state.resume_from(generation, None)
                if time.monotonic() - opened < 1.0:
                    self._stopping.wait(next(delays))
            except KubeError as e:
                if self._stopping.is_set():
                    break
                self._post(generation, self._set_connected, False)
                delay = next(delays)
                _log.warning("watch failed", path=self.path, error=repr(e), retry_in=delay)
                self._stopping.wait(delay)
            except Exception:
                if self._stopping.is_set():
                    break
                delay = next(delays)
                _log.exception("watch thread failed, restarting it", path=self.path)
                state.resume_from(generation, None)  # what reached the cache is unknown
                self._post(generation, self._restarted)
                self._stopping.wait(delay)
            finally:
                state.unblocked(generation)

    def _relist(self, generation: int) -> bool:
        self._state.blocking(generation)
        items, version = self._list()
        self._state.heard(generation)
        if not self._post(generation, self._relisted, items):
            return False
        self._state.resume_from(generation, version)
        return True

    def _watch(self, generation: int, version: str) -> int:
        """One watch from `version` until the server ends it, advancing the resume point with
        every event and bookmark; the number of object events delivered. Raises Gone when
        `version` is too old, other KubeErrors when the connection fails."""
        query = {
            **self._selectors,
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": version,
            "timeoutSeconds": str(fresh.watch_timeout_seconds(self.max_quiet)),
        }
        state = self._state
        state.blocking(generation)
        stream = self._kube.stream_lines(self.path, query=query)
        if not state.adopt(generation, stream, self._stopping):
            stream.close()
            return 0
        state.heard(generation)
        self._post(generation, self._set_connected, True)
        delivered = 0
        resource = describe("GET", self.path)[1]
        counters: dict[str, Any] = {}
        try:
            for line in stream:
                state.heard(generation)
                kind, obj = _diffs.parse_watch_line(line)
                counter = counters.get(kind)
                if counter is None:
                    counter = counters[kind] = WATCH_EVENTS.labels(resource=resource, type=kind)
                counter.inc()
                if kind != _diffs.BOOKMARK:
                    if not self._post(generation, self._apply, kind, obj):
                        break
                    delivered += 1
                version = resource_version(obj) or version
                state.resume_from(generation, version)
        finally:
            ended_by_server = state.drop(stream)  # the server ended it: news too
            stream.close()
        if ended_by_server:
            state.heard(generation)
        return delivered

    def _post(self, generation: int, callback: Callable[..., None], *args: Any) -> bool:
        """Hand `callback(*args)` to the loop, unless this thread has been replaced; False
        when it was not handed over (replaced, or the loop is gone)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stopping.set()
            return False
        with self._state.lock:
            if self._state.generation != generation:
                return False
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # the loop closed between the check and the call
                self._stopping.set()
                return False
        return True

    # --- applying changes (loop thread) ------------------------------------------------

    def _relisted(self, items: list[dict[str, Any]]) -> None:
        self.relists += 1
        self._apply_list(items)

    def _restarted(self) -> None:
        self.restarts += 1
        self._set_connected(False)

    def _set_connected(self, connected: bool) -> None:
        self._connected = connected
        self._report_health()

    def _report_health(self) -> None:
        """Wake waiters when `healthy` changed since it was last reported."""
        healthy = self.healthy
        if healthy != self._reported_healthy:
            self._reported_healthy = healthy
            self._wake()
