"""Where a run's hooks and its span meet the run path, for every run: a Scheduler's and a
guard's. Three points: the moment a body starts (`observe_start`: the span starts, `started`
is emitted), the moment the outcome is known (`observe_end`: the span ends, `succeeded` or
`failed` is emitted with the outcome, message, error and duration), and every skip
(`observe_skip`, from the one place each skip is counted). A run is described by its
`started` event (`RunEvent`: its job, namespace, tick, holder, bucket and token; a guard's
job is its ScheduledJob, else the guard's name), which its span and its other events carry.

`RunObserver` is a Scheduler's: the dispatch (`Services`) calls it where a handler is called
(`calling`, in the handler's task or pool thread: the span becomes current), where the run
ended (`ended`) and from `Services.skip`. A guard's front end and engine call the functions
themselves (`GuardRun.event`): its span starts under the caller's context, since a guard
runs inside someone else's scheduler, request or span.

Owns no policy of its own: what hooks receive is `_hooks`, what a span carries `_tracing`.
Nothing here may fail a run or a skip: an error of the observation itself is logged and
swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime

from leasecron._logs import get_logger
from leasecron.models.specs import Outcome, ScheduledJob
from leasecron.runtime._context import JobContext
from leasecron.runtime._hooks import RunEvent, RunEventKind, RunHooks, kind_of
from leasecron.runtime._invoke import HandlerEnd
from leasecron.runtime._tracing import Parent, RunSpan

_log = get_logger("leasecron.runtime.hooks")


def observe_start(
    hooks: RunHooks,
    run: RunEvent,
    *,
    parent: Parent | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> RunSpan:
    """The body of the run whose `started` event is `run` starts now: its span (started
    under `parent`, `RunSpan.start`; the caller makes it current), and `run` emitted
    (coroutine hooks on `loop`)."""
    span = RunSpan(None)
    try:
        span = RunSpan.start(
            job=run.job,
            namespace=run.namespace,
            tick=run.tick,  # type: ignore[arg-type]  # a run has its tick
            token=run.token,
            holder=run.holder,
            bucket=run.bucket,
            parent=parent,
        )
        if hooks.wants(RunEventKind.STARTED):
            hooks.emit(run, loop=loop)
    except Exception as e:
        _log.warning("run start not observed", job=run.job, error=repr(e))
    return span


def observe_end(
    hooks: RunHooks,
    run: RunEvent,
    span: RunSpan,
    *,
    outcome: Outcome,
    message: str,
    error: BaseException | None,
    duration: float | None,
) -> None:
    """The run whose `started` event is `run` ended with `outcome`: its span ends,
    `succeeded` or `failed` is emitted."""
    try:
        span.end(outcome=outcome, message=message, error=error)
        kind = kind_of(outcome)
        if hooks.wants(kind):
            ended = dataclasses.replace(
                run, kind=kind, outcome=outcome, message=message, error=error, duration=duration
            )
            hooks.emit(ended)
    except Exception as e:
        _log.warning("run end not observed", job=run.job, error=repr(e))


def observe_skip(hooks: RunHooks, skipped: RunEvent) -> None:
    """A tick this replica (`skipped.holder`) does not run, for `skipped.reason`: no span."""
    try:
        if hooks.wants(RunEventKind.SKIPPED):
            hooks.emit(skipped)
    except Exception as e:
        _log.warning("skip not observed", job=skipped.job, error=repr(e))


def started_event(ctx: JobContext) -> RunEvent:
    """The `started` event of the run of `ctx`."""
    return RunEvent(
        kind=RunEventKind.STARTED,
        job=ctx.job,
        namespace=ctx.namespace,
        tick=ctx.tick,
        holder=ctx.holder,
        bucket=ctx.bucket,
        token=ctx.token,
    )


class RunObserver:
    """The hooks and spans of the runs of one Scheduler."""

    def __init__(self, hooks: RunHooks | None = None) -> None:
        self.hooks = hooks if hooks is not None else RunHooks()
        self._spans: weakref.WeakKeyDictionary[JobContext, RunSpan] = weakref.WeakKeyDictionary()

    def calling(self, ctx: JobContext) -> Callable[[], AbstractContextManager[None]]:
        """What `HandlerRun` enters around the handler call of `ctx` (from the loop)."""
        loop = asyncio.get_running_loop()

        @contextlib.contextmanager
        def call() -> Iterator[None]:
            span = self._spans[ctx] = observe_start(self.hooks, started_event(ctx), loop=loop)
            with span.current():
                yield

        return call

    def ended(self, ctx: JobContext, end: HandlerEnd, outcome: Outcome, message: str) -> None:
        """The run of `ctx` ended with `outcome` (from the loop)."""
        span = self._spans.pop(ctx, None) or RunSpan(None)
        observe_end(
            self.hooks,
            started_event(ctx),
            span,
            outcome=outcome,
            message=message,
            error=end.error,
            duration=end.duration,
        )

    def skipped(
        self,
        job: ScheduledJob,
        *,
        namespace: str,
        holder: str,
        reason: str,
        tick: datetime | None,
    ) -> None:
        """This replica did not run `tick` of `job`, for `reason`."""
        skipped = RunEvent(
            kind=RunEventKind.SKIPPED,
            job=job.name,
            namespace=namespace,
            tick=tick,
            holder=holder,
            bucket=job.spec.bucket,
            reason=reason,
        )
        observe_skip(self.hooks, skipped)
