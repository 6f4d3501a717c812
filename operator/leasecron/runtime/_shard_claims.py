"""Claiming a shard instant (`_shards.ShardTicks`, docs/design.md §5.3 step 2, §5.7, §5.13,
§5.14): `ShardClaims` claims each instant of a shard Lease after this replica's claim of its
previous instant has settled, ranked by rendezvous over the live members that registered the
handlers due (the member placed first by the timer, `place_first`, ranks first), again after
a live grant ends or while the store is out of reach, until the latest startingDeadline of
the jobs due (`_claim_until`); hands RunLocally jobs to an unguarded run after an outage long
enough; adopts a claim of ours whose reply was lost; claims the new instant of a run request
(`request`) or of `run_now`. Every claim goes above the highest token on record for its jobs
(`note_token`).

What a grant runs is `_shard_runs.ShardRuns`'.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasecron._logs import get_logger
from leasecron.coordination import Grant, Skipped
from leasecron.coordination.locks import (
    SKIP_CONFLICT,
    SKIP_EXISTS,
    SKIP_UNAVAILABLE,
    SKIP_UNCERTAIN,
)
from leasecron.coordination.shards import ShardLock
from leasecron.kube.errors import KubeError
from leasecron.models.decisions import SKIP_DEADLINE, SKIP_LIVE_GRANT, SKIP_TAKEN, placed_rank
from leasecron.models.groups import moved_jobs, own_ref
from leasecron.models.leases import lease_annotations
from leasecron.models.shards import ShardRef, shard_key
from leasecron.models.specs import ScheduledJob, StoreUnavailablePolicy
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._services import Services
from leasecron.runtime._shard_group import ShardGroup
from leasecron.runtime._shard_jobs import JobEntry, ShardJobs, staying
from leasecron.runtime._shard_leases import ShardLocks
from leasecron.runtime._shard_runs import ShardRuns
from leasecron.runtime._tick_records import RecordMode

_log = get_logger("leasecron.runtime.shards")
_RETRIED = (SKIP_LIVE_GRANT, SKIP_UNAVAILABLE, SKIP_UNCERTAIN, SKIP_EXISTS, SKIP_CONFLICT)
"""Skips after which a shard instant is claimed again (until its latest startingDeadline).
`exists`: the claim meant to create the shard Lease, which was there already (made with the
group record, or by another replica, before this replica's view showed it); the lock has read
it now, so the claim is decided again at once. `conflict`: another write landed first (a
request's claim of a later instant, another replica's claim of this one); decided again on
the Lease as it is now: taken, a live grant to wait out, or claimable."""
_UNPLACED_WAIT = 0.25
"""The part of a step a claim that another member is placed to make first waits before its
work (`ShardClaims._defer_unplaced`)."""
SKIP_BETTER_PLACED = SkipReason.BETTER_PLACED
"""Another live replica registered every handler due at the instant: it claims it."""


@dataclass(frozen=True)
class _Outage:
    """Every claim attempt failed to reach the store for the RunLocally window."""


class ShardClaims:
    """The claims of this replica's claim engine, one shard instant at a time."""

    def __init__(
        self,
        services: Services,
        jobs: ShardJobs,
        group: ShardGroup,
        locks: ShardLocks,
        runs: ShardRuns,
    ) -> None:
        self._services = services
        self._jobs = jobs
        self._group = group
        self._locks = locks
        self._runs = runs
        self._claiming: dict[str, asyncio.Future[None]] = {}
        """Per shard Lease: settled once this replica's claim of its latest instant is."""
        self._first: dict[tuple[str, datetime], tuple[str, int]] = {}
        """Per shard Lease and instant due: the live member placed to claim it first, and how
        many jobs of the group are due at the instant."""
        self._tokens: dict[str, int] = {}
        """Per job: the highest fencing token its ScheduledJob's status records (a token of
        another shard Lease, another group's, or a guard's): its next claim goes above it."""

    def place_first(self, lease: str, instant: datetime, member: str, *, jobs_due: int) -> None:
        """`member` claims `instant` of shard Lease `lease` first (`_shard_timer`); `jobs_due`
        of the group are due then."""
        self._first[(lease, instant)] = (member, jobs_due)

    def _step(self, lease: str, instant: datetime) -> float:
        """Seconds between ranks for `instant` of `lease`: `claim_step`, and more for a large
        instant (`claim_step_per_job` per job due in the group), whose claim writes take
        longer to land: the next rank must not write before the placed member's claim has."""
        tuning = self._services.tuning
        _, jobs_due = self._placed(lease, instant)
        return tuning.claim_step + tuning.claim_step_per_job * jobs_due

    def _placed(self, lease: str, instant: datetime) -> tuple[str | None, int]:
        """The member placed first for `instant` of `lease` and the jobs due then (None, 0
        when the timer placed nothing: a request's or a catch-up's instant)."""
        return self._first.get((lease, instant), (None, 0))

    def note_token(self, name: str, token: int) -> None:
        """The highest token on record for job `name` (its status.lastRun): a job keeps one
        token sequence for life, whichever Lease claimed its earlier ticks."""
        if token > self._tokens.get(name, 0):
            self._tokens[name] = token

    def _above(self, names: Iterable[str]) -> int:
        return max((self._tokens.get(name, 0) for name in names), default=0)

    async def run_now(self, job: ScheduledJob, tick: datetime) -> bool:
        """Claim and run `tick` of `job` now, whatever its startingDeadline (an explicit
        request: `Scheduler.run_once`); False when this replica did not get the claim."""
        entry = JobEntry(job=job, after=tick, not_before=tick)
        self._jobs.put(entry)
        ref = self._jobs.ref_of(job.name, self._group.state())
        lock = self._locks.get(ref)
        result = await self._claim(lock, ref, tick, [entry], {job.name: True}, local=False)
        if not isinstance(result, Grant):
            return False
        await self._runs.hold_and_run(lock, ref, result, [entry], {job.name: True})
        return True

    async def request(
        self,
        job: ScheduledJob,
        *,
        wanted: Callable[[], bool],
        give_up: datetime,
        body: Callable[[Grant], Awaitable[None]],
    ) -> Grant | Skipped:
        """A run request's claim (`_requests`): a new instant, now (above the shard's
        high-water mark, so its token is above every earlier one), of `job`'s shard through
        the one claim write, tried again while `wanted()` and until `give_up`; `body(grant)`
        runs under the grant beside the shard's jobs it overtook."""
        ref = self._jobs.ref_of(job.name, self._group.state())
        lock, clock = self._locks.get(ref), self._services.clock

        tries = 0

        async def now_when_free() -> datetime | Skipped:
            """Now, once no shard-mate's due tick is left unclaimed: a claim of now would
            take it from the replica due to run it. Waits until it is claimed, or past its
            startingDeadline (then it is missed whoever claims next). A claim tried again
            gives up at `give_up` or once the request is no longer wanted."""
            nonlocal tries
            tries += 1
            while True:
                instant = clock.now()
                if tries > 1 and (instant >= give_up or not wanted()):
                    return Skipped(SKIP_DEADLINE)
                pending = self._unclaimed_due(ref, lock, instant)
                if pending is None:
                    return instant
                left = (min(give_up, pending[1]) - instant).total_seconds()
                if left <= 0 or not wanted():
                    return Skipped(SKIP_DEADLINE)
                await lock.wait_taken(pending[0], timeout=left)

        result = await _claim_until(
            self._services,
            lock,
            now_when_free,
            rank=0,
            step=0.0,
            claim_deadline=None,
            give_up=give_up,
            local_jobs=[],
            above=self._above([job.name]),
        )
        if isinstance(result, Grant):
            await self._runs.hold_and_run(lock, ref, result, [], {}, also=body)
        assert not isinstance(result, _Outage)  # no RunLocally jobs: never an outage
        return result

    def _unclaimed_due(
        self, ref: ShardRef, lock: ShardLock, now: datetime
    ) -> tuple[datetime, datetime] | None:
        """The latest tick at or before `now` of a job of shard Lease `ref` (registered here
        or not) that the Lease does not record yet and that can still start, with its
        start-by; None when there is none."""
        state = self._group.state()
        jobs = [e.job for e in self._jobs.of_shard(ref, state)]
        jobs += self._jobs.foreign_of_shard(ref, state)
        found: tuple[datetime, datetime] | None = None
        for job in jobs:
            schedule = job.spec.parsed_schedule
            due = schedule.latest_at_or_before(now) if schedule is not None else None
            if due is None or job.spec.suspend:
                continue
            start_by = due + job.spec.starting_deadline
            if start_by > now and not lock.taken(due) and (found is None or due > found[0]):
                found = (due, start_by)
        return found

    async def instant(self, ref: ShardRef, instant: datetime, catch_up: dict[str, bool]) -> None:
        """Claim `instant` of shard Lease `ref` after this replica's claim of its previous
        instant is settled, then run every job of the shard it makes ours."""
        loop = asyncio.get_running_loop()
        previous = self._claiming.get(ref.lease)
        settled: asyncio.Future[None] = loop.create_future()
        self._claiming[ref.lease] = settled
        self._services.pacer.claiming(settled)
        try:
            if previous is not None:
                await previous
            lock = self._locks.get(ref)
            waited = 0.0 if lock.holding() else await self._defer_unplaced(ref.lease, instant)
            due = self._jobs.due(catch_up, instant)
            result = await self._claim(lock, ref, instant, due, catch_up, local=True, waited=waited)
            if isinstance(result, _Outage):
                local = [e for e in due if _runs_locally(e.job)]
                runs = [self._runs.run_here(e, instant, record=RecordMode.UNGUARDED) for e in local]
                rest = [e for e in due if not _runs_locally(e.job)]
                claim = asyncio.ensure_future(
                    self._claim(lock, ref, instant, rest, catch_up, local=False)
                )
                await asyncio.gather(claim, *runs)
                result, due = claim.result(), rest
            gone = result.moved if isinstance(result, Grant) else _moved(lock)
            moving = self._moved_away(gone, due, instant, catch_up)
            if isinstance(result, Skipped):
                # Skips by reason, per job as well as per shard Lease.
                skipped = [e.job for e in staying(due, gone)]
                self._services.skip_all(skipped, result.reason, tick=instant)
            elif isinstance(result, Grant):
                await self._runs.hold_and_run(lock, ref, result, due, catch_up, settled=settled)
            await asyncio.gather(*moving)
        finally:
            if not settled.done():
                settled.set_result(None)
            if self._claiming.get(ref.lease) is settled:
                del self._claiming[ref.lease]
            self._first.pop((ref.lease, instant), None)

    def _moved_away(
        self,
        gone: frozenset[str],
        due: list[JobEntry],
        instant: datetime,
        catch_up: dict[str, bool],
    ) -> list[asyncio.Task[None]]:
        """Claims of `instant` on their own Leases for the jobs due that the grant (or the
        Lease, claimed first) marks moved, `gone`: the own Lease was made before the record
        lists them, at or above all claimed for them here; the claim here runs nothing of
        them (`staying`)."""
        if not gone or not any(e.job.name in gone for e in due):
            return []
        group, loop = self._services.group, asyncio.get_running_loop()
        return [
            loop.create_task(
                self.instant(
                    own_ref(group, e.job.name),
                    instant,
                    {e.job.name: catch_up.get(e.job.name, False)},
                ),
                name=f"claim of {e.job.name} on its own Lease",
            )
            for e in due
            if e.job.name in gone
        ]

    async def _defer_unplaced(self, lease: str, instant: datetime) -> float:
        """Seconds this replica's claim of `instant` of `lease` waited before its work: a
        quarter step when another member is placed to claim it first (this claim waits a
        step at least, and its work on the loop, all shards' at once on a large instant,
        would hold up the placed claims' writes); none otherwise."""
        placed, _ = self._placed(lease, instant)
        if placed is None or placed == self._services.identity:
            return 0.0
        wait = self._step(lease, instant) * _UNPLACED_WAIT
        await asyncio.sleep(wait)
        return wait

    async def _claim(
        self,
        lock: ShardLock,
        ref: ShardRef,
        instant: datetime,
        due: list[JobEntry],
        catch_up: dict[str, bool],
        *,
        local: bool,
        waited: float = 0.0,
    ) -> Grant | _Outage | Skipped:
        """One claim after the rendezvous stagger among the live members that registered the
        handlers of every job due (none while we hold the shard), again after a live grant
        ends or while the store cannot be reached, until the latest startingDeadline of the
        jobs due (for a catch-up instant: that long from now). Skipped without a claim, also
        when another replica is better placed (it has handlers we lack). `_Outage` (with
        `local`) when the RunLocally jobs due may run unguarded. `waited`: seconds of the
        stagger spent already."""
        if not due:
            return Skipped(SkipReason.NOTHING_DUE)
        rank = await self._rank(ref, instant, due)
        if isinstance(rank, Skipped):
            return rank
        deadline = max(e.job.spec.starting_deadline for e in due)
        catching = any(catch_up.get(e.job.name, False) for e in due)
        return await _claim_until(
            self._services,
            lock,
            instant,
            rank=rank,
            step=self._step(ref.lease, instant),
            claim_deadline=None if catching else deadline,
            give_up=(self._services.clock.now() if catching else instant) + deadline,
            local_jobs=[e.job for e in due if _runs_locally(e.job)] if local else [],
            above=self._above(e.job.name for e in due),
            waited=waited,
        )

    async def _rank(self, ref: ShardRef, instant: datetime, due: list[JobEntry]) -> int | Skipped:
        """This replica's rank for `instant` of `ref` among the live members that registered
        the handlers of every job due, once the group record was read (or could not be);
        Skipped when another live replica registered them all and this one did not."""
        services = self._services
        try:
            await self._group.ready()
        except KubeError as e:  # the claim below meets the same failure and reports it
            _log.debug("group record not read yet", group=services.group, error=repr(e))
        needed = self._jobs.handlers_due(ref, instant, due, self._group.state())
        able = services.membership.members_with(needed, own=services.registry.name_set())
        if able and services.identity not in able:
            # Another live replica registered every handler due: it claims the instant,
            # so that no job of the shard goes without a run.
            return Skipped(SKIP_BETTER_PLACED)
        key = shard_key(services.group, ref.lease, instant)
        return placed_rank(
            key,
            services.identity,
            able or services.membership.members(),
            first=self._placed(ref.lease, instant)[0],
        )

    async def adopt(self, ref: ShardRef, grant: Grant) -> None:
        """A claim of ours whose reply was lost turned out to have landed: run the jobs of its
        instant that can still start (the others are recorded Missed by their own plans),
        then release it."""
        lock = self._locks.made(ref)
        if lock is None:
            await grant.release()
            return
        of_shard = self._jobs.of_shard(ref, self._group.state())
        due = self._jobs.due([e.job.name for e in of_shard], grant.tick)
        _log.info(
            "adopting a shard claim whose reply was lost",
            lease=ref.lease,
            tick=grant.tick.isoformat(),
            token=grant.token,
            jobs=len(due),
        )
        await self._runs.hold_and_run(lock, ref, grant, due, {})


Moving = Callable[[], Awaitable[datetime | Skipped]]
"""The instant a run request's claim tries next (now, when it may), or why it gives up."""


async def _claim_until(
    services: Services,
    lock: ShardLock,
    instant: datetime | Moving,
    *,
    rank: int,
    step: float,
    claim_deadline: timedelta | None,
    give_up: datetime,
    local_jobs: list[ScheduledJob],
    above: int,
    waited: float = 0.0,
) -> Grant | _Outage | Skipped:
    """The one loop around the claim write: the claim of `instant` on `lock` after this
    replica's stagger (`rank` steps of `step` s less `waited`; none while it holds the shard),
    again after a retried skip until `give_up`: at once after `exists` (once), after a live
    grant ends, else after a pause growing to 2 s. `_Outage`: the store out of reach for the
    RunLocally window of `local_jobs`, and nothing says another replica has the instant. A
    `Moving` instant (a request's) is asked for each attempt; a `taken` skip retries it."""
    clock, tuning = services.clock, services.tuning
    fixed = isinstance(instant, datetime)
    retried = _RETRIED if fixed else (*_RETRIED, SKIP_TAKEN)
    window = min(
        [tuning.unguarded_after]
        + [j.spec.starting_deadline.total_seconds() / 2 for j in local_jobs]
    )
    outage_since: float | None = None
    lagged = False
    pause = tuning.claim_retry
    attempt = functools.partial(
        _attempt, lock, instant, rank=rank, step=step, claim_deadline=claim_deadline, above=above
    )
    tick, result = await attempt(clock.now(), waited=waited)
    while isinstance(result, Skipped) and result.reason in retried:
        left = (give_up - clock.now()).total_seconds()
        if result.unreachable:
            outage_since = clock.monotonic() if outage_since is None else outage_since
            out_for = clock.monotonic() - outage_since
            if local_jobs and out_for >= window and not lock.taken_by_other(tick):
                return _Outage()
        else:
            outage_since = None
        if left <= pause:
            return result
        if result.reason == SKIP_EXISTS and not lagged:
            lagged = True  # decided again at once, on the Lease the lock has just read
        elif result.reason == SKIP_LIVE_GRANT:
            # The holder of the previous instant takes this one too, normally; if it
            # cannot (it died, or lost a race), the shard is free or expires first.
            claimable = await lock.wait_claimable(tick, timeout=left if fixed else min(left, 1))
            if not claimable and fixed:
                return result
        else:
            wait = pause
            if local_jobs and outage_since is not None:
                wait = max(0.01, min(pause, window - (clock.monotonic() - outage_since)))
            await asyncio.sleep(wait)
            pause = min(pause * 2, 2.0)
        tick, result = await attempt(tick)
    return result


async def _attempt(
    lock: ShardLock,
    instant: datetime | Moving,
    tick: datetime,
    *,
    rank: int,
    step: float,
    claim_deadline: timedelta | None,
    above: int,
    waited: float = 0.0,
) -> tuple[datetime, Grant | Skipped]:
    """One claim of `_claim_until`: the instant tried (`tick` until a `Moving` one moves) and
    what the claim write gave. The stagger counts from the instant: the timer launches a
    claim a little before it (`_shard_timer`), and nothing is claimed before it comes."""
    if not isinstance(instant, datetime):
        moved = await instant()
        if isinstance(moved, Skipped):
            return tick, moved
        tick = moved
    else:
        tick = instant
    stagger = 0.0 if lock.holding() else max(0.0, rank * step - waited)
    stagger += max(0.0, (tick - lock.claims.clock.now()).total_seconds())
    return tick, await lock.try_claim(
        tick, stagger=stagger, starting_deadline=claim_deadline, above=above
    )


def _moved(lock: ShardLock) -> frozenset[str]:
    """The jobs the shard Lease (as this replica sees it now) marks moved to their own."""
    seen = lock.lease.observe()
    return moved_jobs(lease_annotations(seen.obj)) if seen is not None else frozenset()


def _runs_locally(job: ScheduledJob) -> bool:
    return job.spec.on_store_unavailable is StoreUnavailablePolicy.RUN_LOCALLY
