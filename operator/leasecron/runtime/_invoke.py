"""Running one handler call: a coroutine function as an asyncio task, a plain function in the
scheduler's thread pool, both with the run's structlog context bound.

Owns starting, interrupting (set `ctx.lost`; cancel the task of an async handler) and waiting
for a handler, bounded by a grace period, and stopping it at its spec.timeout
(`RunControl.run`; each attempt of a retried run has its own `RunControl.attempt()`). It
does not decide outcomes or write records; the dispatchers do, from the `HandlerEnd`
returned here. What it cannot promise: to stop a sync handler that ignores `ctx.lost`. After
the grace period its thread is abandoned (left running, no longer waited for) and the end is
reported as `abandoned`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import weakref
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import structlog

from leasecron._metrics import RUN_DURATION, START_LAG
from leasecron.models.clocks import Clock
from leasecron.models.names import format_tick
from leasecron.runtime._context import JobContext
from leasecron.runtime._registry import RegisteredHandler
from leasecron.runtime._timeouts import Timeout


class StopReason(StrEnum):
    """Why the runtime interrupted a handler."""

    LOST = "lost"  # the grant was lost, or would expire before it could be renewed
    STOPPING = "stopping"  # the scheduler is shutting down
    REMOVED = "removed"  # the job was deleted, suspended (single-owner) or moved elsewhere
    TIMED_OUT = "timed_out"  # the attempt ran longer than the job's spec.timeout
    REPLACED = "replaced"  # a later tick of the job replaces it (concurrencyPolicy: Replace)


@dataclass(frozen=True)
class HandlerEnd:
    """How a handler call ended. `error` is the exception it raised (never the CancelledError
    of our own interruption); `interrupted` is True when we asked it to stop before it ended;
    `abandoned` is True when it had not ended after the grace period."""

    error: BaseException | None
    interrupted: bool
    abandoned: bool
    duration: float
    late: bool = False
    """The handler was never called: it could not start before its start-by time (for
    instance behind a full thread pool), so the tick counts as missed."""


class _TooLate(Exception):
    """Raised instead of calling a handler past its start-by time."""


def log_fields(ctx: JobContext) -> dict[str, Any]:
    """The fields every log line about this run carries."""
    return {
        "job": ctx.job,
        "namespace": ctx.namespace,
        "tick": format_tick(ctx.tick),
        "holder": ctx.holder,
        "token": ctx.token,
    }


class HandlerRun:
    """One call of a handler. `start()` once, then `wait()` or `stop()`."""

    def __init__(
        self,
        handler: RegisteredHandler,
        ctx: JobContext,
        *,
        executor: Executor,
        clock: Clock,
        start_by: datetime | None = None,
        on_call: Callable[[], AbstractContextManager[None]] | None = None,
    ) -> None:
        self.handler = handler
        self.start_by = start_by
        """Wall-clock time after which the handler is not called any more (None: no limit)."""
        self._on_call = on_call
        """Entered where the handler is called (its task, or the pool thread of a sync
        handler) once it is sure to be called; the handler runs inside it (its span, hooks)."""
        self.ctx = ctx
        self._executor = executor
        self._clock = clock
        self._task: asyncio.Task[HandlerEnd] | None = None
        self._interrupted = False
        self._started = 0.0

    def start(self, *, observe_lag: bool = True) -> None:
        """Start the call (in the running loop). Records START_LAG when `observe_lag`."""
        if self._task is not None:
            raise RuntimeError("a HandlerRun starts once")
        self._started = self._clock.monotonic()
        if observe_lag:
            lag = (self._clock.now() - self.ctx.tick).total_seconds()
            START_LAG.labels(self.ctx.namespace, self.ctx.job, self.ctx.bucket).observe(
                max(0.0, lag)
            )
        self._task = asyncio.get_running_loop().create_task(
            self._call(), name=f"leasecron handler {self.ctx.job}"
        )

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def interrupt(self) -> None:
        """Ask the handler to stop: set `ctx.lost`; cancel the task of an async handler."""
        self.ctx.lost.set()
        if self._task is None or self._task.done():
            return
        self._interrupted = True
        if self.handler.is_async:
            self._task.cancel()

    async def wait(self, within: float | None = None) -> HandlerEnd | None:
        """The end of the call, or None when `within` seconds pass first."""
        task = self.task
        done, _ = await asyncio.wait([task], timeout=within)
        return task.result() if done else None

    async def stop(self, *, grace: float) -> HandlerEnd:
        """Interrupt, wait up to `grace` seconds, then give up on it (abandoned)."""
        self.interrupt()
        end = await self.wait(grace)
        if end is not None:
            return end
        task = self.task
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
        self.ctx.logger.warning("handler did not stop within the grace period", grace=grace)
        return HandlerEnd(error=None, interrupted=True, abandoned=True, duration=self._elapsed())

    @property
    def task(self) -> asyncio.Task[HandlerEnd]:
        """The call's task (after `start()`)."""
        if self._task is None:
            raise RuntimeError("HandlerRun.start() was not called")
        return self._task

    def _elapsed(self) -> float:
        return max(0.0, self._clock.monotonic() - self._started)

    async def _call(self) -> HandlerEnd:
        error: BaseException | None = None
        try:
            with structlog.contextvars.bound_contextvars(**log_fields(self.ctx)):
                await self._invoke()
        except asyncio.CancelledError:
            if not self._interrupted:
                raise
        except _TooLate:
            return HandlerEnd(
                error=None, interrupted=False, abandoned=False, duration=0.0, late=True
            )
        except (Exception, SystemExit) as e:
            error = e
        duration = self._elapsed()
        RUN_DURATION.labels(self.ctx.namespace, self.ctx.job, self.ctx.bucket).observe(duration)
        return HandlerEnd(
            error=error, interrupted=self._interrupted, abandoned=False, duration=duration
        )

    def _calling(self) -> AbstractContextManager[None]:
        return self._on_call() if self._on_call is not None else contextlib.nullcontext()

    def _check_start(self) -> None:
        """At the moment the handler would be called: not past its start-by time."""
        if self.start_by is not None and self._clock.now() > self.start_by:
            raise _TooLate

    async def _invoke(self) -> None:
        fn, ctx = self.handler.fn, self.ctx
        if self.handler.is_async:
            self._check_start()
            with self._calling():
                result = fn(ctx)
                if inspect.isawaitable(result):
                    await result
            return

        def guarded(ctx: JobContext) -> object:
            self._check_start()  # in the pool thread: a queued call may start late
            with self._calling():
                return fn(ctx)

        call = functools.partial(contextvars.copy_context().run, guarded, ctx)
        result = await asyncio.get_running_loop().run_in_executor(self._executor, call)
        if inspect.isawaitable(result):
            await result


class RunControl:
    """The way in to one dispatch's handler from outside: `request_stop(reason, grace)` asks
    the running handler (now, or as soon as one starts) to stop, and gives up on it after
    `grace` seconds. One per dispatch; the dispatcher runs its handlers through `run()`.
    Each attempt of a retried run gets its own `attempt()` control, which the dispatch's
    stop reaches and whose own stop (a timeout) leaves the dispatch going."""

    def __init__(self) -> None:
        self.reason: StopReason | None = None
        self.grace = 0.0
        self.note = ""
        """What the stop is about, for the run's message ("after 30s", "by tick T")."""
        self._stopped: asyncio.Future[None] | None = None
        """Resolved by the stop request; made by the first waiter (none on most runs)."""
        self._attempts: weakref.WeakSet[RunControl] | None = None
        """Made on the first `attempt()`: one per run start otherwise, on the start path."""

    @property
    def stopping(self) -> bool:
        return self.reason is not None

    def _stop_requested(self) -> asyncio.Future[None]:
        """A future resolved when a stop is requested (a plain future: no task per run)."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_future()
            if self.stopping:
                self._stopped.set_result(None)
        return self._stopped

    def request_stop(self, reason: StopReason, *, grace: float, note: str = "") -> None:
        """Ask for a stop; the first reason wins."""
        if self.reason is None:
            self.reason, self.grace, self.note = reason, grace, note
            if self._stopped is not None and not self._stopped.done():
                self._stopped.set_result(None)
            for attempt in list(self._attempts or ()):
                attempt.request_stop(reason, grace=grace, note=note)

    def attempt(self) -> RunControl:
        """A control for one attempt under this one: stopped whenever this one is."""
        child = RunControl()
        if self.reason is not None:
            child.request_stop(self.reason, grace=self.grace, note=self.note)
        else:
            if self._attempts is None:
                self._attempts = weakref.WeakSet()
            self._attempts.add(child)
        return child

    async def wait_stopped(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to `timeout` seconds for a stop request; True when there is one."""
        if not self.stopping:
            await asyncio.wait([self._stop_requested()], timeout=timeout)
        return self.stopping

    async def run(
        self,
        call: HandlerRun,
        *,
        observe_lag: bool = True,
        limit: Timeout | None = None,
    ) -> HandlerEnd:
        """Start `call` and wait for its end, stopping it when a stop is requested, or once
        it ran `limit.seconds` (reason TIMED_OUT, then `limit.grace` seconds to stop)."""
        call.start(observe_lag=observe_lag)
        ended = call.task
        seconds = limit.seconds if limit is not None else None
        try:
            waiters: list[asyncio.Future[Any]] = [ended, self._stop_requested()]
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            if ended.done():
                return ended.result()
            if not self.stopping and limit is not None:
                self.request_stop(StopReason.TIMED_OUT, grace=limit.grace, note=limit.note)
            return await call.stop(grace=self.grace)
        except asyncio.CancelledError:
            call.interrupt()
            raise
