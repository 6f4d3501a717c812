"""`TickWorker`: the tick loop of one scheduled job (every-replica or once-per-tick) on this
replica, and the every-replica dispatch.

The loop computes the next tick from the job's schedule in its time zone (`_planning`), waits
for it plus the job's jitter, and hands it to the bucket's dispatch as a task, so that timing
never waits on the API server. It re-plans at once when the spec changes, starts nothing while
the job is suspended, and overlaps the job with itself on this replica only as its
concurrencyPolicy says (`_overlap`): Forbid, a tick that comes while the previous run still
goes waits for it and starts if it still can by its startingDeadline; Replace, the same once
the previous run, told to stop, has ended; Allow, at once. It does not decide which replica
runs a tick: the dispatch does. Jobs claimed through shards have no TickWorker: one timer for
all of them is `_shards.ShardTicks`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leasecron.models.specs import Bucket, CatchUpPolicy, ConcurrencyPolicy, ScheduledJob
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._overlap import Overlapping, going, replace
from leasecron.runtime._planning import NextTick, jitter_delay, next_tick
from leasecron.runtime._services import RecordMode, Services
from leasecron.runtime._timeouts import stop_grace

_MAX_SLEEP = 30.0
"""Long waits are cut into pieces this long, so a wall clock that jumps is noticed."""


@dataclass(frozen=True)
class TickOrder:
    """One tick handed to a dispatch: the job as it was then, the tick, whether it is a
    catch-up run, and the earliest instant whose ticks may count as missed."""

    job: ScheduledJob
    planned: NextTick
    not_before: datetime

    @property
    def tick(self) -> datetime:
        return self.planned.tick


Dispatch = Callable[[TickOrder, RunControl], Coroutine[Any, Any, None]]


class TickWorker:
    """Runs the tick loop of one job until stopped."""

    def __init__(
        self, services: Services, job: ScheduledJob, *, created: datetime, dispatch: Dispatch
    ) -> None:
        self._services = services
        self._job = job
        self._dispatch = dispatch
        self._after = created
        self._not_before = created
        self._changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._running: tuple[asyncio.Task[None], RunControl] | None = None
        self._earlier = Overlapping()
        """Runs of earlier ticks still going beside `_running` (concurrencyPolicy: Allow)."""
        self._pending: TickOrder | None = None

    @property
    def job(self) -> ScheduledJob:
        return self._job

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"leasecron ticks {self._job.name}"
        )

    def update(self, job: ScheduledJob) -> None:
        """Take a new spec of the same job: re-plan from it now."""
        if self._job.spec.suspend and not job.spec.suspend:
            # Ticks while suspended were skipped on purpose: they are not missed ones.
            self._not_before = max(self._not_before, self._services.clock.now())
        self._job = job
        self._changed.set()

    async def stop(self, reason: StopReason) -> None:
        """No new ticks. A running dispatch may finish within the grace period (at shutdown)
        or is stopped at once (job removed); then it is asked to stop and given up on."""
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self._stop_running(reason)
        finally:
            close = getattr(self._dispatch, "close", None)
            if close is not None:
                await close()

    async def _stop_running(self, reason: StopReason) -> None:
        grace = self._services.grace_period
        runs = [self._running, *self._earlier.runs()]
        await asyncio.gather(*(stop_run(run, reason=reason, grace=grace) for run in runs))

    async def _loop(self) -> None:
        clock = self._services.clock
        while True:
            job = self._job
            schedule = job.spec.parsed_schedule
            if schedule is None:
                return
            planned = next_tick(
                schedule,
                now=clock.now(),
                after=self._after,
                starting_deadline=job.spec.starting_deadline,
                catch_up=_catch_up(job),
            )
            delay = jitter_delay(job.name, planned.tick, job.spec.jitter)
            if not await self._sleep_until(planned.tick, extra=delay):
                continue  # the spec changed: plan again from it
            self._after = planned.tick
            self._fire(TickOrder(self._job, planned, self._not_before))

    def _fire(self, order: TickOrder) -> None:
        if order.job.spec.suspend:
            self._services.skip(order.job, SkipReason.SUSPENDED, tick=order.tick)
            return
        policy = order.job.spec.concurrency_policy
        if going(self._running) and policy is not ConcurrencyPolicy.ALLOW:
            # Forbid: keep the newest tick to start when this run ends, if it still can by
            # then (its startingDeadline); an older waiting tick is dropped. Replace: the
            # same, once the run, told to stop, has ended (within the stop grace).
            if self._pending is not None:
                self._services.skip(self._pending.job, SkipReason.OVERLAP, tick=self._pending.tick)
            self._pending = order
            if policy is ConcurrencyPolicy.REPLACE and self._running is not None:
                grace = stop_grace(self._services.grace_period)
                replace(self._running, tick=order.tick, grace=grace)
            return
        self._launch(order)

    def _launch(self, order: TickOrder) -> None:
        control = RunControl()
        task = asyncio.get_running_loop().create_task(
            self._dispatch(order, control), name=f"leasecron tick {order.job.name}"
        )
        task.add_done_callback(self._ran)
        self._earlier.keep(self._running)
        self._running = (task, control)

    def _ran(self, task: asyncio.Task[None]) -> None:
        if self._running is not None and self._running[0] is not task:
            return  # an earlier run of an Allow job; the newest one still goes
        pending, self._pending = self._pending, None
        if pending is None or self._loop_task is None:
            return
        job = self._job
        late = self._services.clock.now() > pending.tick + job.spec.starting_deadline
        if late and not pending.planned.catch_up:
            self._services.skip(job, SkipReason.OVERLAP, tick=pending.tick)
            return
        self._fire(TickOrder(job, pending.planned, self._not_before))

    async def _sleep_until(self, moment: datetime, *, extra: float) -> bool:
        """Sleep until `moment` (wall clock) plus `extra` seconds; False when woken early by
        a spec change."""
        while True:
            remaining = (moment - self._services.clock.now()).total_seconds() + extra
            if remaining <= 0:
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, _MAX_SLEEP))
            if self._changed.is_set():
                self._changed.clear()
                return False


async def stop_run(
    running: tuple[asyncio.Task[None], RunControl] | None, *, reason: StopReason, grace: float
) -> None:
    """Stop one dispatch's run: at shutdown it may first finish within 80 % of the grace
    period; then it is asked to stop (the rest of the grace period) and finally cancelled."""
    if running is None or running[0].done():
        return
    task, control = running
    if reason is StopReason.STOPPING:
        await asyncio.wait([task], timeout=grace * 0.8)
        grace *= 0.2
    control.request_stop(reason, grace=grace)
    await asyncio.wait([task], timeout=grace + 5.0)
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _catch_up(job: ScheduledJob) -> CatchUpPolicy:
    """every-replica jobs have no shared record of missed ticks: they never catch up."""
    if job.spec.bucket is Bucket.EVERY_REPLICA:
        return CatchUpPolicy.NONE
    return job.spec.catch_up.policy


class EveryReplicaDispatch:
    """every-replica: run locally, every tick, no Lease and no record; counted in RUNS."""

    def __init__(self, services: Services) -> None:
        self._services = services

    async def __call__(self, order: TickOrder, control: RunControl) -> None:
        await self._services.run_tick(
            order.job, order.tick, control, fence=None, record=RecordMode.NONE
        )
