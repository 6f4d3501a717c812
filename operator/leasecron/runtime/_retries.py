"""spec.retry: the attempts of one run of a tick, on the replica that holds its claim.

A run whose attempt ends `Failed` or `TimedOut` is tried again after `retry.delay(attempt)`,
up to `retry.limit` more times, with the same tick, fencing token and JobRun: each attempt is
appended to the JobRun's `status.attempts`, which is patched between attempts (still
`Running`, its message saying when the next attempt starts), and the run's outcome is the last
attempt's. Nothing is retried that ended otherwise (`LostLock`: the grant is gone; stopped for
shutdown, removal or a replacing tick: the run is over).

While the back-off goes the dispatch keeps running, so its claim stays in use and the shard
grant is renewed as during a handler call; with `lock.keepAlive: false` the run's atMostFor
bounds every attempt of the tick together. A retry never starts at or after the next tick of
the schedule unless `concurrencyPolicy` is `Allow`, nor after the atMostFor bound; then the
run ends with the last attempt's outcome and its message says why the retries stopped.

A requested run (`Taken.until`) has no next tick: its retries start before its own deadline
instead (the claim's atMostFor from its start), whatever the policy.

Before a retry starts, its attempt is written `Running` and confirmed (`Mark`); if that cannot
be confirmed, the attempt is not run. So a record whose last attempt is finished has no attempt
going. A holder that dies during the back-off leaves such a record, and the operator hands the
retry to another replica (`models.handover`); the late writes of the dead holder are refused
(`Recorder.patch_final`). `decide` is pure; `Attempts` drives the loop for
`Services.run_tick`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from leasecron.coordination import Fence, LostEvent
from leasecron.models.names import format_tick
from leasecron.models.specs import (
    Attempt,
    ConcurrencyPolicy,
    Outcome,
    RetrySpec,
    ScheduledJob,
)
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerEnd, RunControl
from leasecron.runtime._records import why_stopped
from leasecron.runtime._shardfences import RunFence

if TYPE_CHECKING:
    from leasecron.runtime._services import Services

RETRIED = (Outcome.FAILED, Outcome.TIMED_OUT)
"""The outcomes of an attempt that spec.retry tries again."""

Progress = Callable[[tuple[Attempt, ...], str], Awaitable[None]]
"""Writes the attempts so far, and what comes next, to the run's record (between attempts)."""
Mark = Callable[[tuple[Attempt, ...], str], Awaitable[bool]]
"""Writes the attempts so far plus the next one, Running, and confirms it landed (awaited)."""


@dataclass(frozen=True)
class Retry:
    """Start attempt `attempt` at `at`."""

    attempt: int
    at: datetime


@dataclass(frozen=True)
class NoRetry:
    """The run is over; `why` (when not empty) says why retries stopped before the limit."""

    why: str = ""


def decide(
    *,
    retry: RetrySpec,
    attempt: int,
    outcome: Outcome,
    now: datetime,
    next_tick: datetime | None,
    policy: ConcurrencyPolicy,
    bound: datetime | None,
) -> Retry | NoRetry:
    """What follows attempt number `attempt` (1 is the first) that ended `outcome` at `now`:
    a retry after `retry.delay(attempt + 1)`, unless the limit is reached, the outcome is not
    retried, the retry would start at or after `next_tick` (unless `policy` is Allow) or
    after `bound` (the claim's atMostFor)."""
    if outcome not in RETRIED or attempt > retry.limit:
        return NoRetry()
    at = now + retry.delay(attempt + 1)
    if policy is not ConcurrencyPolicy.ALLOW and next_tick is not None and at >= next_tick:
        return NoRetry(
            f"attempt {attempt + 1} would start at or after the next tick "
            f"({format_tick(next_tick)}; concurrencyPolicy is {policy.value})"
        )
    if bound is not None and at >= bound:
        return NoRetry(f"attempt {attempt + 1} would start after the claim's lock.atMostFor")
    return Retry(attempt=attempt + 1, at=at)


def final_message(message: str, *, attempts: int, limit: int, why: str) -> str:
    """The run's message: its last attempt's, with the count of attempts of a retried run and
    why retries stopped early."""
    count = f"attempt {attempts} of {limit + 1}"
    if why:
        count = f"{count}; retries stopped: {why}"
    elif attempts == 1:
        return message
    return f"{message} ({count})" if message else count


@dataclass(frozen=True)
class Finished:
    """How a run ended over all its attempts; `attempts` is None for a run that ran once."""

    outcome: Outcome
    message: str
    attempts: tuple[Attempt, ...] | None
    context: JobContext


class Attempts:
    """The attempts of one run: reports each, retries while `decide` says so."""

    def __init__(
        self,
        services: Services,
        job: ScheduledJob,
        control: RunControl,
        *,
        fence: Fence | None,
        progress: Progress,
        mark: Mark | None = None,
        earlier: tuple[Attempt, ...] = (),
        until: datetime | None = None,
    ) -> None:
        """`mark`: confirms each retry's start before it runs (None: not recorded);
        `earlier`: attempts of the run made before (by a holder that vanished); `until`:
        retries start before it instead of before the schedule's next tick."""
        self._services, self._job, self._control = services, job, control
        self._fence, self._progress, self._mark = fence, progress, mark
        self._done: list[Attempt] = list(earlier)
        self._until = until

    async def run(self, ctx: JobContext, end: HandlerEnd, attempt: RunControl) -> Finished:
        """Report the first attempt (ended as `end` under `attempt`), then retry until done.
        Every attempt is counted in RUNS; the listeners hear of the run once, at its end."""
        services, job, retry = self._services, self._job, self._job.spec.retry
        while True:
            outcome, message = services.report(job, ctx, end, attempt, notify=False)
            now = services.clock.now()
            start = now - timedelta(seconds=end.duration)
            self._done.append(Attempt(start=start, end=now, outcome=outcome, message=message))
            step = decide(
                retry=retry,
                attempt=ctx.attempt,
                outcome=outcome,
                now=now,
                # The next tick only bounds a retry (not computed for a run that ends here).
                next_tick=(
                    self._next_tick(ctx.tick)
                    if self._until is None and outcome in RETRIED and ctx.attempt <= retry.limit
                    else None
                ),
                policy=job.spec.concurrency_policy,
                bound=self._bound(now),
            )
            if isinstance(step, NoRetry):
                return self._finish(ctx, outcome, message, why=step.why)
            await self._progress(
                tuple(self._done),
                f"attempt {ctx.attempt} ended {outcome.value}: {message}; attempt "
                f"{step.attempt} at {format_tick(step.at)}",
            )
            ctx.logger.info("run retried", attempt=step.attempt, at=format_tick(step.at))
            wait = (step.at - services.clock.now()).total_seconds()
            if await self._control.wait_stopped(max(0.0, wait)):
                why = why_stopped(self._control.reason)
                return self._finish(ctx, outcome, message, why=why)
            if not await self._marked(step.attempt, outcome, message):
                why = f"attempt {step.attempt} could not be recorded as started"
                return self._finish(ctx, outcome, message, why=why)
            ctx = dataclasses.replace(
                ctx,
                attempt=step.attempt,
                lost=LostEvent(),
                logger=ctx.logger.bind(attempt=step.attempt),
            )
            attempt = self._control.attempt()
            ended = await services.run_handler(job, ctx, attempt, observe_lag=False)
            if ended is None:
                return self._finish(ctx, Outcome.FAILED, "no handler", why="")
            end = ended

    async def _marked(self, attempt: int, outcome: Outcome, message: str) -> bool:
        """Record attempt `attempt` as Running before it starts, confirmed: if this holder
        dies now, the record says the attempt may have run (the operator does not hand it
        over); a death before it says it did not."""
        if self._mark is None:
            return True
        start = self._services.clock.now()
        running = Attempt(start=start, outcome=Outcome.RUNNING)
        note = f"attempt {attempt} running (attempt {attempt - 1} ended {outcome.value}: {message})"
        return await self._mark((*self._done, running), note)

    def _finish(self, ctx: JobContext, outcome: Outcome, message: str, *, why: str) -> Finished:
        limit = self._job.spec.retry.limit
        count = len(self._done)
        text = final_message(message, attempts=count, limit=limit, why=why)
        attempts = tuple(self._done) if count > 1 else None
        self._services.recorder.notify(self._job, ctx, outcome, text)
        return Finished(outcome=outcome, message=text, attempts=attempts, context=ctx)

    def _next_tick(self, tick: datetime) -> datetime | None:
        schedule = self._job.spec.parsed_schedule
        return schedule.next_after(tick) if schedule is not None else None

    def _bound(self, now: datetime) -> datetime | None:
        """When the run's own atMostFor bound ends (a run that is not keepAlive), wall time."""
        fence, until = self._fence, self._until
        if not isinstance(fence, RunFence) or math.isinf(fence.expires_at):
            return until
        left = fence.expires_at - self._services.clock.monotonic()
        bound = now + timedelta(seconds=max(0.0, left))
        return bound if until is None else min(bound, until)
