"""once-per-tick dispatch (DESIGN §5) with `coordination: Lock`: the claim on the job's Lease,
then the run of the claimed tick (and, as its holder, the catch-up of missed ones) through the
one run-a-tick path, then the release.

One preferred replica per tick (rendezvous rank 0 among the live members) claims at once and
the others only after rank x step if it did not, so the API writes per run stay at claim +
JobRun create + JobRun status + release whatever the replica count. The holder plans catch-up
from the tick its claim's write replaced (`Grant.replaced_tick`), never from an earlier read.

While the store cannot be reached, a claim is retried until the tick's startingDeadline. With
`onStoreUnavailable: RunLocally` a tick runs unguarded (marked `Unguarded`, recorded once the
store answers) only when every attempt failed for `Tuning.unguarded_after` seconds and nothing
known says another replica has it; never after its JobRun turned out to exist. Ticks that ran
unguarded here are left out of later catch-up plans. A claim of ours whose reply was lost and
that the lock finds later is adopted: run if its tick can still start, else released and
recorded as Missed. What it does not promise: exactly-once (DESIGN §7).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from datetime import datetime
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination import Grant, Skipped, TickLock
from leasecron.coordination.locks import SKIP_SHARDED
from leasecron.models.clocks import Clock
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import rendezvous_rank
from leasecron.models.names import LABEL_JOB, job_lease_name
from leasecron.models.specs import (
    ScheduledJob,
    StoreUnavailablePolicy,
    job_label_value,
)
from leasecron.runtime._handover import owner_reference, take_back
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._planning import NextTick, plan_claimed, tick_key
from leasecron.runtime._services import MISSED_LATE, RecordMode, Services
from leasecron.runtime._ticks import TickOrder

_log = get_logger("leasecron.runtime.once")
_UNGUARDED_MEMORY = 1000
"""Ticks run unguarded that a job remembers (to leave them out of catch-up)."""


def lock_config(job: ScheduledJob) -> LockConfig:
    lock = job.spec.lock
    return LockConfig(
        at_most_for=lock.at_most_for, at_least_for=lock.at_least_for, keep_alive=lock.keep_alive
    )


class LockDispatch:
    """The once-per-tick Lock dispatch of one job (keeps its TickLock between ticks)."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._lock: TickLock | None = None
        self._lock_key: tuple[Any, ...] = ()
        self._job: ScheduledJob | None = None
        self._unguarded: OrderedDict[datetime, None] = OrderedDict()
        self._adopted: set[tuple[asyncio.Task[None], RunControl]] = set()

    async def lock_for(self, job: ScheduledJob) -> TickLock:
        """The job's TickLock; a new one (the old one closed) when its uid or lock changed."""
        self._job = job
        config = lock_config(job)
        key = (job.uid, config)
        if self._lock is None or key != self._lock_key:
            if self._lock is not None:
                await self._lock.close()
            services = self._services
            party = services.party(
                name=job_lease_name(job.name),
                labels={LABEL_JOB: job_label_value(job.name)},
                owner_reference=owner_reference(job),
                floor=services.token_floor(job.name),
            )
            self._lock = TickLock(
                services.kube,
                services.lease_cache,
                config=config,
                job=job.name,
                on_orphan=self._adopt,
                **party,
            )
            self._lock_key = key
        return self._lock

    async def close(self) -> None:
        for task, control in list(self._adopted):
            control.request_stop(StopReason.STOPPING, grace=self._services.grace_period)
            await asyncio.gather(task, return_exceptions=True)
        if self._lock is not None:
            await self._lock.close()

    async def __call__(self, order: TickOrder, control: RunControl) -> None:
        services, job = self._services, order.job
        lock = await self.lock_for(job)
        members = services.membership.members()
        rank = rendezvous_rank(tick_key(job.name, order.tick), services.identity, members)
        deadline = None if order.planned.catch_up else job.spec.starting_deadline
        result = await lock.try_claim(
            order.tick, stagger=rank * services.tuning.claim_step, starting_deadline=deadline
        )
        if isinstance(result, Skipped) and result.reason == SKIP_SHARDED:
            # Its Lease still hands this tick to a shard: this replica sees the job claimed per
            # job now, so it takes the ticks back first (and claims once that is done).
            if not await take_back(services, job, fallback_s=lock.config.lease_duration_s):
                return
            result = await lock.try_claim(order.tick, starting_deadline=deadline)
        if isinstance(result, Skipped) and result.unreachable:
            result = await self._claim_through_outage(lock, order, result)
        if isinstance(result, Grant):
            await self._run_granted(order, control, lock, result)
        elif result.unreachable and self._may_run_locally(lock, order):
            self._remember_unguarded(order.tick)
            await services.run_tick(
                job, order.tick, control, fence=None, record=RecordMode.UNGUARDED
            )

    async def _claim_through_outage(
        self, lock: TickLock, order: TickOrder, first: Skipped
    ) -> Grant | Skipped:
        """Retry a claim that could not reach the store, until it gets an answer, the tick's
        startingDeadline passes, or (RunLocally) the store has been out of reach for the
        job's unguarded window."""
        services, job = self._services, order.job
        clock, tuning = services.clock, services.tuning
        deadline = job.spec.starting_deadline
        window = min(tuning.unguarded_after, deadline.total_seconds() / 2)
        local = job.spec.on_store_unavailable is StoreUnavailablePolicy.RUN_LOCALLY
        since = clock.monotonic()
        result: Grant | Skipped = first
        pause = tuning.claim_retry
        claim_deadline = None if order.planned.catch_up else deadline
        while isinstance(result, Skipped) and result.unreachable:
            elapsed = clock.monotonic() - since
            if local and elapsed >= window:
                return result
            wait = pause if not local else min(pause, window - elapsed)
            if claim_deadline is not None:
                left = (order.tick + claim_deadline - clock.now()).total_seconds()
                if left <= 0:
                    return Skipped("deadline")
                wait = min(wait, left)
            await asyncio.sleep(max(0.01, wait))
            pause = min(pause * 2, 2.0)
            result = await lock.try_claim(order.tick, starting_deadline=claim_deadline)
        return result

    def _may_run_locally(self, lock: TickLock, order: TickOrder) -> bool:
        job = order.job
        if job.spec.on_store_unavailable is not StoreUnavailablePolicy.RUN_LOCALLY:
            return False
        if lock.taken_by_other(order.tick):
            self._services.skip(job, "taken", tick=order.tick)
            return False
        late = self._services.clock.now() > order.tick + job.spec.starting_deadline
        if late and not order.planned.catch_up:
            self._services.skip(job, "deadline", tick=order.tick)
            return False
        return True

    def _remember_unguarded(self, tick: datetime) -> None:
        self._unguarded[tick] = None
        while len(self._unguarded) > _UNGUARDED_MEMORY:
            self._unguarded.popitem(last=False)

    async def _run_granted(
        self, order: TickOrder, control: RunControl, lock: TickLock, grant: Grant
    ) -> None:
        services, job = self._services, order.job
        schedule = job.spec.parsed_schedule
        assert schedule is not None
        plan = plan_claimed(
            schedule,
            claimed=grant.tick,
            previous=grant.replaced_tick,
            previous_ran=not grant.replaced_unrun,
            not_before=order.not_before,
            catch_up=job.spec.catch_up.policy,
            max_ticks=job.spec.catch_up.max_ticks,
        ).without(set(self._unguarded))
        watch = services.stop_when_lost(grant.lost, control)
        try:
            async with _GrantGuard(lock, grant, clock=services.clock):
                await services.run_plan(
                    job,
                    plan,
                    control,
                    fence=grant,
                    record=lambda _: RecordMode.GUARDED,
                    observe_lag=lambda tick: tick == plan.claimed and not order.planned.catch_up,
                )
        finally:
            watch()
            await grant.release()

    async def _adopt(self, grant: Grant) -> None:
        """A claim of ours whose reply was lost turned out to have landed: run its tick if it
        can still start (and did not run unguarded here), else release it and record the
        tick as Missed."""
        services, job, lock = self._services, self._job, self._lock
        if job is None or lock is None:
            await grant.release()
            return
        late = services.clock.now() > grant.tick + job.spec.starting_deadline
        if grant.tick in self._unguarded or late:
            await grant.release()
            if late and grant.tick not in self._unguarded:
                await services.record_missed(job, (grant.tick,), grant.token, reason=MISSED_LATE)
            return
        control = RunControl()
        order = TickOrder(job, NextTick(grant.tick), not_before=grant.tick)
        task = asyncio.get_running_loop().create_task(
            self._run_granted(order, control, lock, grant), name=f"adopted {job.name}"
        )
        entry = (task, control)
        self._adopted.add(entry)
        task.add_done_callback(lambda _: self._adopted.discard(entry))


class _GrantGuard:
    """`async with`: KeepAlive while the run goes when keepAlive; otherwise a watchdog that
    marks the grant lost when it would expire (atMostFor) before the handler ends."""

    def __init__(self, lock: TickLock, grant: Grant, *, clock: Clock) -> None:
        self._grant, self._clock = grant, clock
        self._task: asyncio.Task[None] | None = None
        self._keep = lock.keep_alive(grant) if lock.config.keep_alive else None

    async def __aenter__(self) -> None:
        if self._keep is not None:
            self._keep.start()
        else:
            self._task = asyncio.get_running_loop().create_task(self._watchdog())

    async def __aexit__(self, *exc: object) -> None:
        if self._keep is not None:
            await self._keep.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watchdog(self) -> None:
        await self._grant.watch()
