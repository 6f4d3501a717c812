"""Run hooks: application callbacks told when a run starts, succeeds, fails, or when this
replica skips a tick, each with a frozen `RunEvent`.

    scheduler = leasecron.Scheduler("billing-api")

    @scheduler.on_failure
    def report(event: RunEvent) -> None:
        if event.error is not None:
            sentry_sdk.capture_exception(event.error)
        else:
            sentry_sdk.capture_message(f"{event.job}: {event.outcome}: {event.message}")

`Scheduler(hooks=[fn, ...])` subscribes `fn` to every kind of event (it filters on
`event.kind`); `on_start`, `on_success`, `on_failure` and `on_skip` subscribe a function to
one kind. `RunHooks` is the one dispatcher: the scheduler's dispatch and `skip` call it, and
so can any other code that runs a job's tick (a guard around another scheduler's job).

How hooks run, and why. Plain functions run in order on one daemon thread of their own
("leasecron-hooks"): a slow hook (a network call to an error tracker) never blocks the event
loop that claims ticks, and never takes a thread of the handler pool, where it would delay a
handler past its starting deadline. Coroutine functions run as tasks on the scheduler's event
loop (so they may use the application's async clients there); they run concurrently, so
their order is not guaranteed. A hook's exception is logged and counted
(`leasecron_hook_errors_total{reason="raised"}`) and never reaches the job or changes its
outcome. Events wait in a bounded queue: when hooks fall more than `limit` events behind,
further events are dropped and counted (`reason="dropped"`), never queued without bound.

Does not promise: that a hook runs before the run's record is written (records may be
written later, off the start path), or that queued events are delivered when the process
dies (a stopping scheduler waits a few seconds for them: `drain`).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TypeVar

from leasecron._logs import get_logger
from leasecron._metrics import HOOK_ERRORS
from leasecron.models.specs import Bucket, Outcome
from leasecron.runtime._registry import is_async_handler

_log = get_logger("leasecron.runtime.hooks")

RunHook = Callable[["RunEvent"], object]
"""`def hook(event: RunEvent) -> None` or `async def hook(event: RunEvent) -> None`."""


class RunEventKind(StrEnum):
    """What happened to a run."""

    STARTED = "started"  # the handler is being called
    SUCCEEDED = "succeeded"  # it returned (outcome Succeeded, or Unguarded under RunLocally)
    FAILED = "failed"  # any other outcome: Failed, LostLock, a handler stopped or abandoned
    SKIPPED = "skipped"  # a tick this replica did not run; `reason` says why


def kind_of(outcome: Outcome) -> RunEventKind:
    """SUCCEEDED for a run whose handler returned, FAILED for every other end."""
    ok = outcome in (Outcome.SUCCEEDED, Outcome.UNGUARDED)
    return RunEventKind.SUCCEEDED if ok else RunEventKind.FAILED


@dataclass(frozen=True, kw_only=True)
class RunEvent:
    """One event of one run. `tick` is the scheduled instant (the term's start for
    single-owner jobs); `token` the fencing token (None when the run has none); `outcome`,
    `message`, `duration` (seconds) are set when it ended; `error` is the exception the
    handler raised (None when it failed without one, e.g. LostLock); `reason` is why a
    tick was skipped (taken, live_grant, conflict, exists, overlap, deadline, ...)."""

    kind: RunEventKind
    job: str
    namespace: str
    tick: datetime | None
    holder: str
    bucket: Bucket
    token: int | None = None
    outcome: Outcome | None = None
    message: str = ""
    error: BaseException | None = None
    duration: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class _Subscription:
    fn: RunHook
    kinds: frozenset[RunEventKind]
    is_async: bool


class RunHooks:
    """The registered hooks of one Scheduler and their dispatch. Safe from any thread."""

    def __init__(self, hooks: Iterable[RunHook] = (), *, limit: int = 10_000) -> None:
        self._subscriptions: tuple[_Subscription, ...] = ()
        self._wanted: frozenset[RunEventKind] = frozenset()
        self._lock = threading.Lock()
        self._limit = limit
        self._queue: collections.deque[tuple[_Subscription, RunEvent]] = collections.deque()
        self._busy = 0  # queued or running on the hook thread
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._futures: set[Future[object]] = set()
        self._dropping = False
        for fn in hooks:
            self.add(fn)

    def add(self, fn: RunHook, *, kinds: Collection[RunEventKind] = ()) -> RunHook:
        """Subscribe `fn` to `kinds` (none given: every kind); returns `fn`."""
        if not callable(fn):
            raise TypeError(f"a run hook must be callable, got {fn!r}")
        chosen = frozenset(kinds) or frozenset(RunEventKind)
        with self._lock:
            self._subscriptions += (_Subscription(fn, chosen, is_async_handler(fn)),)
            self._wanted |= chosen
        return fn

    def wants(self, kind: RunEventKind) -> bool:
        """Whether any hook listens to `kind` (callers build no event when none does)."""
        return kind in self._wanted

    def emit(self, event: RunEvent, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Hand `event` to its hooks without waiting for them: plain functions to the hook
        thread, coroutine functions to `loop` (default: the running loop; with none, the hook
        thread runs them with `asyncio.run`). Never raises for a hook's sake."""
        for sub in self._subscriptions:
            if event.kind not in sub.kinds:
                continue
            target = loop
            if sub.is_async and target is None:
                try:
                    target = asyncio.get_running_loop()
                except RuntimeError:
                    target = None
            if sub.is_async and target is not None and not target.is_closed():
                self._on_loop(sub, event, target)
            else:
                self._enqueue(sub, event)

    def flush(self, *, timeout: float) -> bool:
        """Block up to `timeout` seconds until every event handed over so far was delivered;
        True when it was. Not from the scheduler's event loop (use `drain`)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            if not self._idle.wait_for(lambda: self._busy == 0, timeout):
                return False
            futures = list(self._futures)
        _, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        return not pending

    async def drain(self, *, timeout: float) -> bool:  # noqa: ASYNC109
        """`flush` from an event loop, without blocking it."""
        with self._lock:
            if self._busy == 0 and not self._futures:
                return True
        return await asyncio.to_thread(self.flush, timeout=timeout)

    # --- delivery -------------------------------------------------------------------------

    def _on_loop(
        self, sub: _Subscription, event: RunEvent, loop: asyncio.AbstractEventLoop
    ) -> None:
        async def call() -> object:
            return await _awaited(sub.fn(event))

        future: Future[object] = asyncio.run_coroutine_threadsafe(call(), loop)
        with self._lock:
            self._futures.add(future)

        def done(finished: Future[object]) -> None:
            with self._lock:
                self._futures.discard(finished)
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                _raised(sub, event, error)

        future.add_done_callback(done)

    def _enqueue(self, sub: _Subscription, event: RunEvent) -> None:
        with self._lock:
            if self._busy >= self._limit:
                first, self._dropping = not self._dropping, True
                HOOK_ERRORS.labels(event.kind.value, "dropped").inc()
                if first:
                    _log.warning("run hooks fall behind; events dropped", limit=self._limit)
                return
            self._queue.append((sub, event))
            self._busy += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._deliver, name="leasecron-hooks", daemon=True
                )
                self._thread.start()
            self._idle.notify_all()

    def _deliver(self) -> None:
        while True:
            with self._idle:
                self._idle.wait_for(lambda: bool(self._queue))
                sub, event = self._queue.popleft()
            try:
                result = sub.fn(event)
                if inspect.isawaitable(result):
                    asyncio.run(_awaited(result))
            except Exception as e:
                _raised(sub, event, e)
            finally:
                with self._idle:
                    self._busy -= 1
                    if self._busy == 0:
                        self._dropping = False
                    self._idle.notify_all()


async def _awaited(result: object) -> object:
    return await result if inspect.isawaitable(result) else result


def _raised(sub: _Subscription, event: RunEvent, error: BaseException) -> None:
    HOOK_ERRORS.labels(event.kind.value, "raised").inc()
    _log.warning(
        "run hook raised",
        hook=getattr(sub.fn, "__qualname__", repr(sub.fn)),
        kind=event.kind.value,
        job=event.job,
        namespace=event.namespace,
        exc_info=error,
    )


_H = TypeVar("_H", bound=RunHook)


class HookDecorators:
    """The decorators that subscribe a function to one kind of event, for whatever owns a
    `RunHooks` (the Scheduler, a Guard): `@owner.on_failure def report(event): ...`."""

    def _run_hooks(self) -> RunHooks:
        raise NotImplementedError

    def on_start(self, fn: _H) -> _H:
        """Decorator: call `fn(event)` when a handler (or a guarded body) starts."""
        return self._hook(fn, RunEventKind.STARTED)

    def on_success(self, fn: _H) -> _H:
        """Decorator: call `fn(event)` when a run succeeded (outcome Succeeded or Unguarded)."""
        return self._hook(fn, RunEventKind.SUCCEEDED)

    def on_failure(self, fn: _H) -> _H:
        """Decorator: call `fn(event)` when a run ended any other way (Failed, TimedOut,
        LostLock, ...); `event.error` is the exception it raised, when it raised one."""
        return self._hook(fn, RunEventKind.FAILED)

    def on_skip(self, fn: _H) -> _H:
        """Decorator: call `fn(event)` for a tick this replica did not run (`event.reason`)."""
        return self._hook(fn, RunEventKind.SKIPPED)

    def _hook(self, fn: _H, kind: RunEventKind) -> _H:
        self._run_hooks().add(fn, kinds=(kind,))
        return fn
