"""`RunObserver`: where a run's hooks and its span meet the runtime's run path. The dispatch
(`Services`) calls it at three points: the moment a handler is called (`calling`, in the
handler's task or pool thread: the span starts and becomes current, `started` is emitted),
the moment the outcome is known (`ended`: the span ends, `succeeded`/`failed` is emitted),
and every skip (`skipped`, from `Services.skip`, the one place skips are counted).

Owns no policy of its own: what hooks receive is `_hooks`, what a span carries `_tracing`.
Nothing here may fail a run: an error of the observation itself is logged and swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime

from leasecron._logs import get_logger
from leasecron.models.specs import Outcome, ScheduledJob
from leasecron.runtime._context import JobContext
from leasecron.runtime._hooks import RunEvent, RunEventKind, RunHooks, kind_of
from leasecron.runtime._invoke import HandlerEnd
from leasecron.runtime._tracing import RunSpan

_log = get_logger("leasecron.runtime.hooks")


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
            span = RunSpan(None)
            try:
                span = self._spans[ctx] = RunSpan.start(
                    job=ctx.job,
                    namespace=ctx.namespace,
                    tick=ctx.tick,
                    token=ctx.token,
                    holder=ctx.holder,
                    bucket=ctx.bucket,
                )
                if self.hooks.wants(RunEventKind.STARTED):
                    self.hooks.emit(_event(ctx, RunEventKind.STARTED), loop=loop)
            except Exception as e:
                _log.warning("run start not observed", job=ctx.job, error=repr(e))
            with span.current():
                yield

        return call

    def ended(self, ctx: JobContext, end: HandlerEnd, outcome: Outcome, message: str) -> None:
        """The run of `ctx` ended with `outcome` (from the loop)."""
        try:
            span = self._spans.pop(ctx, None)
            if span is not None:
                span.end(outcome=outcome, message=message, error=end.error)
            kind = kind_of(outcome)
            if self.hooks.wants(kind):
                event = _event(
                    ctx,
                    kind,
                    outcome=outcome,
                    message=message,
                    error=end.error,
                    duration=end.duration,
                )
                self.hooks.emit(event)
        except Exception as e:
            _log.warning("run end not observed", job=ctx.job, error=repr(e))

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
        if not self.hooks.wants(RunEventKind.SKIPPED):
            return
        event = RunEvent(
            kind=RunEventKind.SKIPPED,
            job=job.name,
            namespace=namespace,
            tick=tick,
            holder=holder,
            bucket=job.spec.bucket,
            reason=reason,
        )
        self.hooks.emit(event)


def _event(
    ctx: JobContext,
    kind: RunEventKind,
    *,
    outcome: Outcome | None = None,
    message: str = "",
    error: BaseException | None = None,
    duration: float | None = None,
) -> RunEvent:
    return RunEvent(
        kind=kind,
        job=ctx.job,
        namespace=ctx.namespace,
        tick=ctx.tick,
        holder=ctx.holder,
        bucket=ctx.bucket,
        token=ctx.token,
        outcome=outcome,
        message=message,
        error=error,
        duration=duration,
    )
