"""What a guard's runs tell the application: its run hooks (`RunHooks`, the Scheduler's own
dispatcher and `RunEvent`s) and its OpenTelemetry span (`RunSpan`), at three points.

- `started`: the body is about to run (called in the caller's thread or task, after a held
  claim). The span `leasecron.run <job>` starts with the caller's current context as its
  parent (a guard runs inside someone else's scheduler, request or span), and the front end
  makes it current around the body, so the body's own spans are its children; `started` is
  emitted.
- `ended`: the engine knows the outcome (Succeeded, Failed with the body's exception,
  LostLock): the span ends with it, `succeeded` or `failed` is emitted with the outcome,
  message, error and duration.
- `skipped`: a tick this replica does not run, from the place the skip is counted in SKIPS
  (the engine's `_skip`, or after `TickLock.try_claim` counted it): `skipped` with the reason.

The run's job, in events and span attributes, is the ScheduledJob of a `job=` guard, else the
guard's name (the name its metrics carry); the bucket is once-per-tick (the guard's promise);
the holder is this replica's identity. Plain hooks run on the hooks' own thread, coroutine
hooks on the loop given (the loop that runs the guard's claims); `close_guards()` and
`aclose_guards()` wait a few seconds for queued events. Nothing here may fail a run or a
skip: an error of the observation is logged and swallowed.
"""

from __future__ import annotations

import asyncio

from leasecron._logs import get_logger
from leasecron.models.specs import Bucket, Outcome
from leasecron.runtime._guard_runs import GuardRun
from leasecron.runtime._hooks import RunEvent, RunEventKind, RunHooks, kind_of
from leasecron.runtime._tracing import RunSpan

_log = get_logger("leasecron.runtime.guards")
BUCKET = Bucket.ONCE_PER_TICK


def job_of(run: GuardRun) -> str:
    """The job a guard's run belongs to: its ScheduledJob, else the guard's name."""
    return run.job or run.guard


def started(
    hooks: RunHooks, run: GuardRun, *, loop: asyncio.AbstractEventLoop | None = None
) -> None:
    """The held `run`'s body starts now: its span starts under the caller's context (the
    caller makes it current with `run.span.current()`), `started` is emitted."""
    try:
        run.span = RunSpan.start(
            job=job_of(run),
            namespace=run.namespace,
            tick=run.tick,
            token=run.token,
            holder=run.holder,
            bucket=BUCKET,
            parent="caller",
        )
        if hooks.wants(RunEventKind.STARTED):
            hooks.emit(_event(run, RunEventKind.STARTED), loop=loop)
    except Exception as e:
        _log.warning("guarded run start not observed", guard=run.guard, error=repr(e))


def ended(
    hooks: RunHooks,
    run: GuardRun,
    *,
    outcome: Outcome,
    message: str,
    error: BaseException | None,
    duration: float,
) -> None:
    """The held `run` ended with `outcome`: its span ends, `succeeded`/`failed` is emitted."""
    try:
        run.span.end(outcome=outcome, message=message, error=error)
        kind = kind_of(outcome)
        if hooks.wants(kind):
            event = _event(
                run, kind, outcome=outcome, message=message, error=error, duration=duration
            )
            hooks.emit(event)
    except Exception as e:
        _log.warning("guarded run end not observed", guard=run.guard, error=repr(e))


def skipped(hooks: RunHooks, run: GuardRun, *, identity: str) -> None:
    """This replica (`identity`) does not run `run.tick`, for `run.reason`."""
    try:
        if hooks.wants(RunEventKind.SKIPPED):
            event = RunEvent(
                kind=RunEventKind.SKIPPED,
                job=job_of(run),
                namespace=run.namespace,
                tick=run.tick,
                holder=identity,
                bucket=BUCKET,
                reason=run.reason,
            )
            hooks.emit(event)
    except Exception as e:
        _log.warning("guarded skip not observed", guard=run.guard, error=repr(e))


def _event(
    run: GuardRun,
    kind: RunEventKind,
    *,
    outcome: Outcome | None = None,
    message: str = "",
    error: BaseException | None = None,
    duration: float | None = None,
) -> RunEvent:
    return RunEvent(
        kind=kind,
        job=job_of(run),
        namespace=run.namespace,
        tick=run.tick,
        holder=run.holder,
        bucket=BUCKET,
        token=run.token,
        outcome=outcome,
        message=message,
        error=error,
        duration=duration,
    )
