"""once-per-tick dispatch (DESIGN §5): the claim on the job's Lease (`coordination: Lock`) or
the group's scheduler leader (`coordination: Leader`), then the JobRun, the handler, the
outcome and the release.

With Lock, one preferred replica per tick (rendezvous rank 0 among the live members) claims at
once and the others only after rank x step if it did not, so the API writes per run stay at
claim + JobRun create + JobRun status + release whatever the replica count. The holder of the
claim also handles catch-up (runs and `Missed` records, `_planning.plan_claimed`). With
`onStoreUnavailable: RunLocally` a claim that cannot reach the store runs the handler anyway,
on every replica, marked `Unguarded`. What it does not promise: exactly-once (DESIGN §7).
"""

from __future__ import annotations

import asyncio
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination import Grant, TickLock
from leasecron.kube.errors import AlreadyExists, KubeError
from leasecron.models.clocks import Clock
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import rendezvous_rank
from leasecron.models.names import LABEL_JOB, format_tick, job_lease_name
from leasecron.models.specs import (
    JobRun,
    Outcome,
    ScheduledJob,
    StoreUnavailablePolicy,
    job_label_value,
)
from leasecron.runtime._invoke import RunControl
from leasecron.runtime._planning import TickPlan, plan_claimed, tick_key
from leasecron.runtime._services import Services
from leasecron.runtime._ticks import TickOrder

_log = get_logger("leasecron.runtime.once")
UNGUARDED_RECORD_TIMEOUT = 2.0
"""Seconds an unguarded run waits for its best-effort JobRun create."""


def owner_reference(job: ScheduledJob) -> dict[str, Any] | None:
    """The ownerReference that makes a Lease or JobRun part of the job (None without uid)."""
    if not job.uid:
        return None
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "name": job.name,
        "uid": job.uid,
    }


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
        self._unreleased: Grant | None = None

    def lock_for(self, job: ScheduledJob) -> TickLock:
        config = lock_config(job)
        key = (job.uid, config)
        if self._lock is None or key != self._lock_key:
            services = self._services
            self._lock = TickLock(
                services.kube,
                services.lease_cache,
                namespace=services.namespace,
                name=job_lease_name(job.name),
                config=config,
                identity=services.identity,
                clock=services.clock,
                job=job.name,
                labels={LABEL_JOB: job_label_value(job.name)},
                owner_reference=owner_reference(job),
            )
            self._lock_key = key
        return self._lock

    async def close(self) -> None:
        if self._lock is not None:
            await self._lock.close()

    async def __call__(self, order: TickOrder, control: RunControl) -> None:
        services, job = self._services, order.job
        lock = self.lock_for(job)
        await self._release_leftover(lock)
        seen = lock.lease.observe()
        previous = seen.observation.record.tick if seen is not None else None
        members = services.membership.members()
        rank = rendezvous_rank(tick_key(job.name, order.tick), services.identity, members)
        deadline = None if order.planned.catch_up else job.spec.starting_deadline
        grant = await lock.claim(
            order.tick, stagger=rank * services.tuning.claim_step, starting_deadline=deadline
        )
        if grant is None:
            # The store is out of reach when the claim said so, or when the watch on the
            # Leases is broken (the view, and so the decision, may be stale).
            unreachable = lock.last_skip == "store_unavailable" or not services.lease_cache.healthy
            if unreachable and job.spec.on_store_unavailable is StoreUnavailablePolicy.RUN_LOCALLY:
                await run_unguarded(services, order, control)
            return
        schedule = job.spec.parsed_schedule
        assert schedule is not None
        plan = plan_claimed(
            schedule,
            claimed=order.tick,
            previous=previous,
            not_before=order.not_before,
            catch_up=job.spec.catch_up.policy,
            max_ticks=job.spec.catch_up.max_ticks,
        )
        watch = services.stop_when_lost(grant.lost, control)
        try:
            async with _GrantGuard(lock, grant, clock=services.clock):
                await _record_missed(services, job, plan, grant.token)
                await _run_plan(services, order, plan, control, grant)
        finally:
            watch()
            await self._release(lock, grant)

    async def _release(self, lock: TickLock, grant: Grant) -> None:
        """Release; when the write did not happen (store out of reach) remember the grant,
        so that the next tick frees it first instead of skipping on our own stale grant."""
        before = lock.lease.observe()
        await grant.release()
        after = lock.lease.observe()
        unchanged = (
            before is not None
            and after is not None
            and (before.resource_version == after.resource_version)
        )
        if unchanged and not grant.lost.is_set() and _still_ours(lock, grant):
            self._unreleased = grant

    async def _release_leftover(self, lock: TickLock) -> None:
        grant, self._unreleased = self._unreleased, None
        if grant is None or not _still_ours(lock, grant):
            return
        grant.released = False  # TickLock.release() writes only for a grant not yet released
        await self._release(lock, grant)


def _still_ours(lock: TickLock, grant: Grant) -> bool:
    seen = lock.lease.observe()
    if seen is None:
        return False
    record = seen.observation.record
    return record.holder == grant.holder and record.transitions == grant.token


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
        grant = self._grant
        while grant.held:
            remaining = grant.expires_at - self._clock.monotonic()
            await grant.lost.wait_async(max(0.01, remaining))


async def _record_missed(services: Services, job: ScheduledJob, plan: TickPlan, token: int) -> None:
    if not plan.missed:
        return
    reason = "no replica started this tick before its startingDeadline"
    written = await services.recorder.record_missed(
        job, plan.missed, holder=services.identity, token=token, reason=reason
    )
    _log.info(
        "missed ticks recorded",
        job=job.name,
        namespace=services.namespace,
        holder=services.identity,
        token=token,
        missed=len(plan.missed),
        written=written,
        more=plan.more_missed,
    )


async def _run_plan(
    services: Services, order: TickOrder, plan: TickPlan, control: RunControl, grant: Grant
) -> None:
    """Run each planned tick in order under one grant, each with its own JobRun."""
    job = order.job
    for tick in plan.run:
        if control.stopping or not grant.held:
            return
        try:
            record = await services.recorder.start_tick(
                job, tick=tick, holder=services.identity, token=grant.token
            )
        except AlreadyExists:
            services.skip(job, "exists", tick=tick)
            continue
        except KubeError as e:
            _log.warning(
                "JobRun not created; tick not run",
                job=job.name,
                tick=format_tick(tick),
                error=repr(e),
            )
            services.skip(job, "record_failed", tick=tick)
            continue
        ctx = services.context(job, tick=tick, token=grant.token, held=lambda: grant.held)
        lag = tick == plan.claimed and not order.planned.catch_up
        end = await services.run_handler(job, ctx, control, observe_lag=lag)
        if end is None:
            await services.recorder.finish(record, outcome=Outcome.FAILED, message="no handler")
            return
        outcome, message = services.report(job, ctx, end, control)
        await services.recorder.finish(record, outcome=outcome, message=message)


async def run_unguarded(services: Services, order: TickOrder, control: RunControl) -> None:
    """RunLocally: the store cannot be reached, so this replica runs the tick anyway, marked
    Unguarded; its JobRun is best effort (the store is probably down)."""
    job = order.job
    deadline = job.spec.starting_deadline
    if not order.planned.catch_up and services.clock.now() > order.tick + deadline:
        services.skip(job, "deadline", tick=order.tick)
        return
    record: JobRun | None = None
    try:
        record = await asyncio.wait_for(
            services.recorder.start_tick(
                job, tick=order.tick, holder=services.identity, token=None
            ),
            UNGUARDED_RECORD_TIMEOUT,
        )
    except (KubeError, TimeoutError):
        record = None
    ctx = services.context(job, tick=order.tick, token=None, unguarded=True)
    ctx.logger.warning("store unavailable: running unguarded (onStoreUnavailable: RunLocally)")
    end = await services.run_handler(job, ctx, control)
    if end is None:
        return
    outcome, message = services.report(job, ctx, end, control)
    if record is not None:
        await services.recorder.finish(record, outcome=outcome, message=message)
