"""What a shard grant runs (`_shards.ShardTicks`, docs/design.md §5.3 step 3-4, §5.6, §5.7):
`ShardRuns.hold_and_run` uses the grant while every job of the shard due at its instant runs
(catch-up planned from the instant the claim replaced, `plan_claimed`) beside the ticks it
overtook of the shard's other jobs (`plan_overtaken`), and keeps it at least the longest
atLeastFor. A claim that replaced no instant plans from the last instant known claimed per
job (`_first_claim_marks`). Each job's plan goes through the one run-a-tick path
(`Services.run_plan`) under a `RunFence` of the grant, after its earlier runs here, or under
a retired shard Lease elsewhere, made way for per its concurrencyPolicy (`_previous_done`).
`run_here` runs a tick without a grant: every tick of an every-replica job (no record), and a
RunLocally job's tick while the store is out of reach (recorded unguarded).

It claims nothing: `_shard_claims` hands it the grants.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from leasecron._logs import get_logger
from leasecron.coordination import Grant
from leasecron.coordination.shards import ShardLock
from leasecron.kube.errors import KubeError
from leasecron.models.shards import ShardRef
from leasecron.models.specs import Bucket, ConcurrencyPolicy, ScheduledJob
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._invoke import RunControl
from leasecron.runtime._overlap import MISSED_OVERLAP, make_way
from leasecron.runtime._planning import (
    TickPlan,
    due_order,
    jitter_delay,
    plan_claimed,
    plan_overtaken,
)
from leasecron.runtime._services import Services
from leasecron.runtime._shard_group import ShardGroup
from leasecron.runtime._shard_jobs import JobEntry, ShardJobs, staying
from leasecron.runtime._shard_leases import RetiredShards
from leasecron.runtime._shardfences import RunFence, run_fence
from leasecron.runtime._tick_records import MISSED_LATE, RecordMode
from leasecron.runtime._timeouts import stop_grace

_log = get_logger("leasecron.runtime.shards")
_MARK_READS = 8
"""JobRun reads at once when a new shard Lease's first claim looks for its jobs' last runs."""
_MARK_RETRIES = (0.25, 1.0)
"""Pauses before reading such a job's JobRuns again when a read fails (a busy API server):
without them its catch-up cannot be planned, and its missed ticks would go unrecorded."""
_FRESH_MARGIN = timedelta(seconds=5)
"""How long before an instant a shard Lease with no instant must have been made for its first
claim to start without creating the record first (`_unclaimed_before`)."""


class ShardRuns:
    """The runs of the instants this replica's claim engine holds."""

    def __init__(
        self, services: Services, jobs: ShardJobs, group: ShardGroup, retired: RetiredShards
    ) -> None:
        self._services = services
        self._jobs = jobs
        self._group = group
        self._retired = retired

    async def hold_and_run(
        self,
        lock: ShardLock,
        ref: ShardRef,
        grant: Grant,
        due: list[JobEntry],
        catch_up: dict[str, bool],
        *,
        settled: asyncio.Future[None] | None = None,
        also: Callable[[Grant], Awaitable[None]] | None = None,
    ) -> None:
        services, instant = self._services, grant.tick
        async with lock.use(grant):
            if settled is not None and not settled.done():
                settled.set_result(None)
            state = self._group.state()
            chosen = set(due)  # a set: a shard may hold thousands of jobs
            others = [e for e in self._jobs.of_shard(ref, state) if e not in chosen]
            due, others = staying(due, grant.moved), staying(others, grant.moved)
            marks = await _first_claim_marks(
                services, grant, [*due, *others], floor=state.floor_tick
            )
            _log.debug(
                "shard instant claimed",
                lease=ref.lease,
                tick=instant.isoformat(),
                token=grant.token,
                jobs=len(due),
            )
            await asyncio.gather(
                *(
                    self._run_due(
                        e, grant, catch_up=catch_up.get(e.job.name, False), mark=marks.get(e)
                    )
                    for e in due
                ),
                *(self._run_overtaken(e, grant, mark=marks.get(e)) for e in others),
                *((also(grant),) if also is not None else ()),
            )
            # atLeastFor: the grant is kept at least that long after its instant.
            hold = max((e.job.spec.lock.at_least_for for e in due), default=timedelta(0))
            left = (instant + hold - services.clock.now()).total_seconds()
            if left > 0 and grant.held:
                await grant.lost.wait_async(left)

    async def _run_due(
        self, entry: JobEntry, grant: Grant, *, catch_up: bool, mark: datetime | None
    ) -> None:
        services, job, instant = self._services, entry.job, grant.tick
        schedule = job.spec.parsed_schedule
        assert schedule is not None
        plan = plan_claimed(
            schedule,
            claimed=instant,
            previous=grant.replaced_tick or mark,
            previous_ran=grant.replaced_tick is None or not grant.replaced_unrun,
            not_before=entry.not_before,
            catch_up=job.spec.catch_up.policy,
            max_ticks=job.spec.catch_up.max_ticks,
        ).without(set(entry.unguarded))
        late = services.clock.now() > instant + job.spec.starting_deadline
        waited = not late and not await self._previous_done(entry, instant)
        plan, overlapped, skipped = due_order(plan, late=late, waited=waited, catch_up=catch_up)
        if skipped is not None:
            services.skip(job, skipped, tick=instant)
        await services.record_missed(job, overlapped, grant.token, reason=MISSED_OVERLAP)
        await self._start(entry, plan, grant, start_by=None if catch_up else instant)

    async def _run_overtaken(self, entry: JobEntry, grant: Grant, *, mark: datetime | None) -> None:
        """A job of the shard not due at the claimed instant: its ticks since the instant the
        claim replaced are ours to run or record (nobody can claim them any more)."""
        services, job = self._services, entry.job
        schedule = job.spec.parsed_schedule
        if schedule is None or job.spec.suspend:
            return
        plan = plan_overtaken(
            schedule,
            instant=grant.tick,
            previous=grant.replaced_tick or mark,
            previous_ran=grant.replaced_tick is None or not grant.replaced_unrun,
            not_before=entry.not_before,
            now=services.clock.now(),
            starting_deadline=job.spec.starting_deadline,
            catch_up=job.spec.catch_up.policy,
            max_ticks=job.spec.catch_up.max_ticks,
        )
        if plan is None:
            return
        ran = entry.unguarded
        plan = TickPlan(
            claimed=plan.claimed,
            run=tuple(t for t in plan.run if t not in ran),
            missed=tuple(t for t in plan.missed if t not in ran),
            more_missed=plan.more_missed,
        )
        _log.info(
            "ticks of a job overtaken by a later instant of its shard",
            job=job.name,
            tick=grant.tick.isoformat(),
            run=len(plan.run),
            missed=len(plan.missed),
        )
        if not await self._previous_done(entry, plan.claimed):
            plan = TickPlan(claimed=plan.claimed, run=(), missed=(*plan.missed, *plan.run))
        await self._start(entry, plan, grant, start_by=None, fresh=True)

    async def _start(
        self,
        entry: JobEntry,
        plan: TickPlan,
        grant: Grant,
        *,
        start_by: datetime | None,
        fresh: bool = False,
    ) -> None:
        if entry.stopped:
            return
        newest = max((plan.claimed, *plan.run, *plan.missed))
        if entry.ran is None or newest > entry.ran:
            entry.ran, entry.ran_token = newest, grant.token
        if not plan.run:
            # Nothing to run: the records only; the job's running run (if any) stays its own.
            await self._services.record_missed(
                entry.job, plan.missed, grant.token, reason=MISSED_LATE
            )
            return
        control = RunControl()
        task = asyncio.get_running_loop().create_task(
            _run_plan(
                self._services, entry.job, plan, grant, control, start_by=start_by, fresh=fresh
            ),
            name=f"leasecron shard run {entry.job.name}",
        )
        entry.earlier.keep(entry.running)
        entry.running = (task, control)
        await asyncio.gather(task, return_exceptions=True)

    async def _previous_done(self, entry: JobEntry, instant: datetime) -> bool:
        """Whether `instant` of the job may start beside its runs here (concurrencyPolicy:
        Forbid waits for them until the instant's startingDeadline, Replace stops them), and
        beside a run of it that may still go on another replica under a retired shard Lease
        (the shard count changed): Forbid and Replace wait for that grant to end, Replace
        until just before the instant's start-by (it cannot stop another replica's run)."""
        runs = [r for r in (entry.running, *entry.earlier.runs()) if r is not None]
        left = instant + entry.job.spec.starting_deadline - self._services.clock.now()
        grace = stop_grace(self._services.grace_period)
        entry.earlier.queue(instant)
        may = await make_way(
            runs, job=entry.job, tick=instant, grace=grace, wait=left.total_seconds()
        )
        claimed = entry.job.spec.bucket is Bucket.ONCE_PER_TICK
        if may and claimed and entry.job.spec.concurrency_policy is not ConcurrencyPolicy.ALLOW:
            elsewhere = self._retired.elsewhere(entry.job)
            if elsewhere is not None:
                left = instant + entry.job.spec.starting_deadline - self._services.clock.now()
                free = await elsewhere.wait_free(timeout=max(0.0, left.total_seconds() - 0.1))
                replace = entry.job.spec.concurrency_policy is ConcurrencyPolicy.REPLACE
                may = free or replace
        return entry.earlier.turn(instant) and may

    async def run_here(self, entry: JobEntry, instant: datetime, *, record: RecordMode) -> None:
        """Tick `instant` of the job run here without a grant, by the same rules as a claimed
        one (its jitter, its startingDeadline, its concurrencyPolicy against its runs here):
        an every-replica job's (`RecordMode.NONE`), or a RunLocally job's while the store is
        out of reach (`RecordMode.UNGUARDED`)."""
        services, job = self._services, entry.job
        if record is RecordMode.NONE:  # the timer launches it a little before the instant
            early = max(0.0, (instant - services.clock.now()).total_seconds())
            await asyncio.sleep(early + jitter_delay(job.name, instant, job.spec.jitter))
        if entry.stopped:
            return
        if services.clock.now() > instant + job.spec.starting_deadline:
            services.skip(job, SkipReason.DEADLINE, tick=instant)
            return
        if not await self._previous_done(entry, instant):
            services.skip(job, SkipReason.OVERLAP, tick=instant)
            return
        if record is RecordMode.UNGUARDED:
            entry.remember_unguarded(instant)
        control = RunControl()

        async def run() -> None:
            await services.run_tick(
                job,
                instant,
                control,
                fence=None,
                record=record,
                start_by=instant + job.spec.starting_deadline,
            )

        task = asyncio.get_running_loop().create_task(run(), name=f"leasecron run {job.name}")
        entry.earlier.keep(entry.running)
        entry.running = (task, control)
        await asyncio.gather(task, return_exceptions=True)


async def _first_claim_marks(
    services: Services, grant: Grant, entries: list[JobEntry], *, floor: datetime | None
) -> dict[JobEntry, datetime]:
    """For a claim that replaced no instant (its shard Lease is new: the shard count
    changed, the Lease was deleted, or the group record was made for existing jobs), the
    newest instant known claimed per job, which its catch-up is planned from instead of
    its creation: the group record's floor tick (`floor`), the job's newest run here, else
    its newest JobRun (one read, only for a job with ticks in between). Only what earlier
    grants did counts (a fencing token below this grant's): the shard's next instants may be
    claimed, run and recorded here while the read is on its way, and their claims replaced
    this one, so they say nothing of the ticks before it. A job whose records cannot be
    read gets the claimed instant: nothing older is run or recorded Missed (the operator
    alarms a tick that has no record)."""
    if grant.replaced_tick is not None:
        return {}
    marks: dict[JobEntry, datetime] = {}
    unsure: list[JobEntry] = []

    def ran(entry: JobEntry) -> datetime | None:
        return entry.ran if entry.ran_token < grant.token else None

    for entry in entries:
        schedule = entry.job.spec.parsed_schedule
        known = [t for t in (floor, ran(entry), entry.not_before) if t is not None]
        if schedule is None:
            continue
        if known and schedule.next_after(max(known)) >= grant.tick:
            marks[entry] = max(known)
        else:
            unsure.append(entry)
    gate = asyncio.Semaphore(_MARK_READS)

    async def read(entry: JobEntry) -> None:
        try:
            async with gate:
                recorded = await _newest_recorded(services, grant, entry.job.name)
        except (KubeError, TimeoutError) as e:
            _log.warning(
                "a new shard Lease's job records unreadable; no catch-up for its claim",
                job=entry.job.name,
                error=repr(e),
            )
            marks[entry] = grant.tick
            return
        known = [t for t in (floor, ran(entry), recorded) if t is not None]
        if known:
            marks[entry] = max(known)

    await asyncio.gather(*(read(e) for e in unsure))
    return marks


async def _newest_recorded(services: Services, grant: Grant, job: str) -> datetime | None:
    """The newest tick of `job` its JobRuns record under a token below `grant`'s, read again
    after `_MARK_RETRIES` pauses while the reads fail and the grant is held; raises the last
    read's KubeError or TimeoutError."""
    for attempt, pause in enumerate(_MARK_RETRIES, start=1):
        try:
            return await services.recorder.newest_tick(job, below=grant.token)
        except (KubeError, TimeoutError) as e:
            if not grant.held:
                raise
            _log.info(
                "a new shard Lease's job records unreadable; reading again",
                job=job,
                attempt=attempt,
                error=repr(e),
            )
            await asyncio.sleep(pause)
    return await services.recorder.newest_tick(job, below=grant.token)


async def _run_plan(
    services: Services,
    job: ScheduledJob,
    plan: TickPlan,
    grant: Grant,
    control: RunControl,
    *,
    start_by: datetime | None,
    fresh: bool,
) -> None:
    deadline = job.spec.starting_deadline
    guarded = services.membership.guarded(job.handler_name)
    first_record = (grant.replaced_tick is None and not _unclaimed_before(grant)) or guarded

    def start_by_of(tick: datetime) -> datetime | None:
        if tick == plan.claimed and start_by is not None:
            return tick + deadline
        if fresh and services.clock.now() <= tick + deadline:
            return tick + deadline
        return None

    def link(fence: RunFence) -> Callable[[], None]:
        return services.stop_when_lost(fence.lost, control)

    with run_fence(grant, job, clock=services.clock, link=link) as fence:
        await services.run_plan(
            job,
            plan,
            control,
            fence=fence,
            # The claimed instant's record follows the start; a catch-up or overtaken
            # tick's is created first (a RunLocally replica may have run it unguarded),
            # and so is every tick claimed on a new shard Lease made too late to be sure
            # that no Lease before it claimed the instant (the high-water mark went with
            # the old one: the tick's record says whether it ran) and every tick of a job
            # that a job guard also runs (it claims on its own Lease: the tick's record
            # decides which of the two runs it).
            record=lambda t: (
                RecordMode.DEFERRED
                if t == plan.claimed and start_by is not None and not first_record
                else RecordMode.GUARDED
            ),
            observe_lag=lambda t: t == plan.claimed and start_by is not None,
            delay=lambda t: (
                jitter_delay(job.name, t, job.spec.jitter) if t == plan.claimed else 0.0
            ),
            start_by=start_by_of,
        )


def _unclaimed_before(grant: Grant) -> bool:
    """Whether no Lease could have claimed `grant`'s instant before it: the claim replaced a
    Lease that never recorded an instant, made (by the API server's clock) well before the
    instant. A Lease of the same name before it was gone by then, and no replica claims an
    instant before it comes by the store's clock; Leases of another shard count are below
    the group's floor tick. `_FRESH_MARGIN` covers the creation time's whole seconds and the
    estimate of the store's clock."""
    created = grant.lease_created
    return created is not None and grant.tick > created + _FRESH_MARGIN
