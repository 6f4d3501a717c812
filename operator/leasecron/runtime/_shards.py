"""`ShardTicks`: the claim engine of every once-per-tick job of this replica's group
(docs/design.md, "The claim engine"), with one timer for all of them and one conditional
write per shard and instant.

1. One loop sleeps until the soonest tick of any job (jobs on one schedule share one tick
   computation), takes every job due then and groups them by shard: a stable hash of the
   job's name over the group's shard count, which the group record fixes (`GroupRecord`:
   every replica follows it).
2. Per shard and instant, after this replica's claim of the shard's previous instant has
   settled (a later instant claimed first would make the earlier one taken), the replicas
   rank themselves (rendezvous over the live members that registered the handlers due) and
   claim after their stagger (`ShardLock.try_claim`). A live grant of another replica, or a
   store out of reach, is waited out and claimed again until the latest startingDeadline of
   the jobs due; each job's own deadline decides whether its tick still starts.
3. The winner runs every job of the shard due at the instant at once, each through the one
   run-a-tick path with the grant's token and its record off the start path, after catch-up
   planned per job from the instant the claim replaced; a job's run of an earlier instant
   still going is waited for, stopped or left beside it per its concurrencyPolicy
   (`_overlap`). Jobs of the shard NOT due at the instant get their ticks between the
   replaced instant and this one (claimed by nobody, and never claimable now), run or
   recorded `Missed` per their own deadline and catch-up.
4. The shard grant is renewed while any run under it goes (`ShardLock.use`); a keepAlive
   job runs as long as it needs, any other is stopped at its atMostFor (`LostLock`); the
   grant is held at least the longest atLeastFor of the jobs run, then released.
5. A claim of ours whose reply was lost and that the lock finds later is adopted: its jobs
   run if they can still start, else are recorded `Missed`, and the grant is released.
6. `onStoreUnavailable: RunLocally`: when every claim attempt failed to reach the store for
   `Tuning.unguarded_after` seconds (at most half the job's startingDeadline) and nothing
   known says another replica has the instant, such jobs run unguarded (recorded once the
   store answers, left out of later catch-up); the others keep trying.

It does not run every-replica or single-owner jobs (`_ticks`, `_owner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from leasecron._logs import get_logger
from leasecron.coordination import Grant, LeaseView, Skipped
from leasecron.coordination.groups import GroupRecord
from leasecron.coordination.locks import (
    SKIP_CONFLICT,
    SKIP_EXISTS,
    SKIP_UNAVAILABLE,
    SKIP_UNCERTAIN,
)
from leasecron.coordination.shards import ShardLock, shard_config, shard_labels
from leasecron.kube.errors import KubeError
from leasecron.models.decisions import (
    SKIP_DEADLINE,
    SKIP_LIVE_GRANT,
    SKIP_TAKEN,
    balanced_first,
    placed_rank,
)
from leasecron.models.groups import GroupState, retired, shard_ref
from leasecron.models.names import LABEL_GROUP, LABEL_ROLE
from leasecron.models.shards import (
    LABEL_SHARD,
    MAX_SHARDS,
    ShardRef,
    due_at,
    shard_key,
    shard_lease_name,
)
from leasecron.models.specs import ConcurrencyPolicy, ScheduledJob, StoreUnavailablePolicy
from leasecron.models.vocabulary import Role, SkipReason
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._overlap import MISSED_OVERLAP, Overlapping, make_way
from leasecron.runtime._planning import (
    NextTick,
    TickPlan,
    jitter_delay,
    next_tick,
    plan_claimed,
    plan_overtaken,
)
from leasecron.runtime._services import MISSED_LATE, RecordMode, Services
from leasecron.runtime._shardfences import RunFence, run_fence
from leasecron.runtime._ticks import stop_run
from leasecron.runtime._timeouts import stop_grace

_log = get_logger("leasecron.runtime.shards")
_MAX_SLEEP = 30.0
_RETRIED = (SKIP_LIVE_GRANT, SKIP_UNAVAILABLE, SKIP_UNCERTAIN, SKIP_EXISTS, SKIP_CONFLICT)
"""Skips after which a shard instant is claimed again (until its latest startingDeadline).
`exists`: the claim meant to create the shard Lease, which was there already (made with the
group record, or by another replica, before this replica's view showed it); the lock has read
it now, so the claim is decided again at once. `conflict`: another write landed first (a
request's claim of a later instant, another replica's claim of this one); decided again on
the Lease as it is now: taken, a live grant to wait out, or claimable."""
SKIP_BETTER_PLACED = SkipReason.BETTER_PLACED
"""Another live replica registered every handler due at the instant: it claims it."""
_RETIRED_TTL = 0.5
"""Seconds the group's held retired shard Leases are read again after."""
_MARK_READS = 8
"""JobRun reads at once when a new shard Lease's first claim looks for its jobs' last runs."""
_FRESH_MARGIN = timedelta(seconds=5)
"""How long before an instant a shard Lease with no instant must have been made for its first
claim to start without creating the record first (`_unclaimed_before`)."""
_UNGUARDED_MEMORY = 1000
"""Ticks run unguarded that a job remembers (to leave them out of catch-up)."""


@dataclass(eq=False)
class _Entry:
    job: ScheduledJob
    after: datetime
    not_before: datetime
    next: NextTick | None = None
    running: tuple[asyncio.Task[None], RunControl] | None = None
    earlier: Overlapping = field(default_factory=Overlapping)
    """Runs of earlier ticks still going beside `running` (concurrencyPolicy: Allow)."""
    stopped: bool = field(default=False)
    unguarded: OrderedDict[datetime, None] = field(default_factory=OrderedDict)
    placed: tuple[int, ShardRef] | None = None
    """The shard Lease of the job under the shard count it was computed for."""
    ran: datetime | None = None
    """The newest tick of the job this replica ran or recorded under a grant."""

    def remember_unguarded(self, tick: datetime) -> None:
        self.unguarded[tick] = None
        while len(self.unguarded) > _UNGUARDED_MEMORY:
            self.unguarded.popitem(last=False)


@dataclass(frozen=True)
class _Outage:
    """Every claim attempt failed to reach the store for the RunLocally window."""


class ShardTicks:
    """The once-per-tick jobs of one running Scheduler."""

    def __init__(self, services: Services, *, shards: int) -> None:
        self._services = services
        self.shards = shards
        """The count this replica was configured with; the group record's count wins."""
        self._entries: dict[str, _Entry] = {}
        self._foreign: dict[str, ScheduledJob] = {}
        self._foreign_placed: dict[str, tuple[int, ShardRef]] = {}
        """Per foreign job: the shard count and the shard Lease it was placed on last."""
        self._locks: dict[str, ShardLock] = {}
        self._changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._instants: set[asyncio.Task[None]] = set()
        self._claiming: dict[str, asyncio.Future[None]] = {}
        """Per shard Lease: settled once this replica's claim of its latest instant is."""
        self._group: GroupRecord | None = None
        self._group_started: asyncio.Task[GroupState] | None = None
        self._retired_refs: dict[str, ShardRef | None] = {}
        self._retired_seen: tuple[float, list[ShardRef]] | None = None
        self._first: dict[tuple[str, datetime], str] = {}
        """Per shard Lease and instant due: the live member placed to claim it first."""
        self._tokens: dict[str, int] = {}
        """Per job: the highest fencing token its ScheduledJob's status records (a token of
        another shard Lease, another group's, or a guard's): its next claim goes above it."""

    # --- the group record -------------------------------------------------------------------

    @functools.cached_property
    def view(self) -> LeaseView:
        """The process's watch-fed view of the namespace's Leases."""
        services = self._services
        return LeaseView.shared(services.lease_cache, clock=services.clock)

    @property
    def group(self) -> GroupRecord:
        if self._group is None:
            services = self._services
            self._group = GroupRecord(
                services.kube,
                self.view,
                namespace=services.namespace,
                group=services.group,
                identity=services.identity,
                clock=services.clock,
                configured_shards=self.shards,
                prepare_shards=True,
            )
        return self._group

    def state(self) -> GroupState:
        """The group record as this replica follows it (its configured count until read)."""
        state = self.group.state if self._group is not None else None
        return state if state is not None else GroupState(shards=self.shards)

    async def _group_ready(self) -> GroupState:
        """The group record, read (or created) once; raises KubeError while it cannot be."""
        task = self._group_started
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._group_started = asyncio.get_running_loop().create_task(
                self.group.start(), name="leasecron group record"
            )
        return await asyncio.shield(task)

    def start(self) -> None:
        """Read (or create) the group record now, in the background, so that the record
        exists as soon as a replica of the group runs; claims wait for it anyway."""
        task = asyncio.get_running_loop().create_task(self._read_group())
        self._instants.add(task)
        task.add_done_callback(self._instants.discard)

    async def _read_group(self) -> None:
        delay = 0.5
        while True:
            try:
                state = await self._group_ready()
            except KubeError as e:
                _log.warning("group record not read; retrying", error=repr(e), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            _log.info("group record read", group=self._services.group, shards=state.shards)
            return

    def ref_of(self, name: str) -> ShardRef:
        """The shard Lease that claims the ticks of the job named `name`."""
        shards = self.state().shards
        entry = self._entries.get(name)
        if entry is not None:
            return self._placed(entry, shards)
        return shard_ref(self._services.group, name, shards=shards)

    # --- the jobs ---------------------------------------------------------------------------

    def add(self, job: ScheduledJob, *, created: datetime) -> None:
        self._entries[job.name] = _Entry(job=job, after=created, not_before=created)
        self._wake()

    def update(self, job: ScheduledJob) -> None:
        entry = self._entries.get(job.name)
        if entry is None:
            return
        if entry.job.spec.suspend and not job.spec.suspend:
            entry.not_before = max(entry.not_before, self._services.clock.now())
        entry.job, entry.next = job, None
        self._wake()

    async def remove(self, name: str, reason: StopReason) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            entry.stopped = True
            await self._stop_running(entry, reason)

    async def run_now(self, job: ScheduledJob, tick: datetime) -> bool:
        """Claim and run `tick` of `job` now, whatever its startingDeadline (an explicit
        request: `Scheduler.run_once`); False when this replica did not get the claim."""
        entry = _Entry(job=job, after=tick, not_before=tick)
        self._entries[job.name] = entry
        ref = self.ref_of(job.name)
        lock = self._lock(ref)
        result = await self._claim(lock, ref, tick, [entry], {job.name: True}, local=False)
        if not isinstance(result, Grant):
            return False
        await self._hold_and_run(lock, ref, result, [entry], {job.name: True})
        return True

    async def claim_request(
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
        ref = self.ref_of(job.name)
        lock, clock = self._lock(ref), self._services.clock
        while True:
            instant = clock.now()
            pending = self._unclaimed_due(ref, lock, instant)
            above = self._above([job.name])
            if pending is not None:
                # A shard-mate's tick is due and nobody claimed it yet: a claim of `instant`
                # would take it from the replica due to run it. Wait until it is claimed, or
                # past its startingDeadline (then it is missed whoever claims next).
                left = (min(give_up, pending[1]) - instant).total_seconds()
                if left <= 0 or not wanted():
                    return Skipped(SKIP_DEADLINE)
                await lock.wait_taken(pending[0], timeout=left)
                continue
            result = await lock.try_claim(instant, above=above)
            if isinstance(result, Grant):
                await self._hold_and_run(lock, ref, result, [], {}, also=body)
                return result
            left = (give_up - clock.now()).total_seconds()
            if left <= 0 or not wanted() or result.reason not in (*_RETRIED, SKIP_TAKEN):
                return result
            if result.reason == SKIP_LIVE_GRANT:
                await lock.wait_claimable(instant, timeout=min(left, 1.0))
            else:  # taken: an instant of ours or another's at or after `now`; a new one
                await asyncio.sleep(min(left, self._services.tuning.claim_retry))

    def _unclaimed_due(
        self, ref: ShardRef, lock: ShardLock, now: datetime
    ) -> tuple[datetime, datetime] | None:
        """The latest tick at or before `now` of a job of shard Lease `ref` (registered here
        or not) that the Lease does not record yet and that can still start, with its
        start-by; None when there is none."""
        shards = self.state().shards
        jobs = [e.job for e in self._of_shard(ref)]
        jobs += [j for j in self._foreign.values() if self._foreign_ref(j.name, shards) == ref]
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

    def track(self, name: str, run: tuple[asyncio.Task[None], RunControl]) -> None:
        """A run of job `name` made outside its ticks here (a retry handed over from a
        vanished holder): the job's later ticks see it as they see their own earlier runs
        (concurrencyPolicy Forbid waits for it, Replace stops it)."""
        entry = self._entries.get(name)
        if entry is not None:
            entry.earlier.keep(run)

    def note_token(self, name: str, token: int) -> None:
        """The highest token on record for job `name` (its status.lastRun): a job keeps one
        token sequence for life, whichever Lease claimed its earlier ticks."""
        if token > self._tokens.get(name, 0):
            self._tokens[name] = token

    def _above(self, names: Iterable[str]) -> int:
        return max((self._tokens.get(name, 0) for name in names), default=0)

    def note_foreign(self, job: ScheduledJob) -> None:
        """A once-per-tick job of the group whose handler is not registered here: this replica
        does not run it, and steps back from claiming its shard's instants when it is due."""
        self._foreign[job.name] = job

    def forget_foreign(self, name: str) -> None:
        self._foreign.pop(name, None)
        self._foreign_placed.pop(name, None)

    def _foreign_ref(self, name: str, shards: int) -> ShardRef:
        placed = self._foreign_placed.get(name)
        if placed is None or placed[0] != shards:
            placed = self._foreign_placed[name] = (
                shards,
                shard_ref(self._services.group, name, shards=shards),
            )
        return placed[1]

    def _handlers_due(self, ref: ShardRef, instant: datetime, due: list[_Entry]) -> set[str]:
        """Handlers of every job of shard Lease `ref` due at `instant`, registered here or
        not."""
        handlers = {e.job.handler_name for e in due}
        shards = self.state().shards
        for job in self._foreign.values():
            schedule = job.spec.parsed_schedule
            if schedule is None or job.spec.suspend:
                continue
            if self._foreign_ref(job.name, shards) == ref and due_at(schedule, instant):
                handlers.add(job.handler_name)
        return handlers

    def _wake(self) -> None:
        self._changed.set()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(
                self._loop(), name="leasecron shard ticks"
            )

    async def close(self, reason: StopReason) -> None:
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(self._stop_running(e, reason) for e in entries))
        for instant in list(self._instants):
            instant.cancel()
        await asyncio.gather(*self._instants, return_exceptions=True)
        for lock in self._locks.values():
            await lock.close()
        if self._group_started is not None and not self._group_started.done():
            self._group_started.cancel()
        if self._group is not None:
            self._group.close()

    async def _stop_running(self, entry: _Entry, reason: StopReason) -> None:
        grace = self._services.grace_period
        runs = [entry.running, *entry.earlier.runs()]
        await asyncio.gather(*(stop_run(run, reason=reason, grace=grace) for run in runs))

    # --- the timer ----------------------------------------------------------------------------

    def _plan(self, entry: _Entry) -> NextTick | None:
        spec = entry.job.spec
        schedule = spec.parsed_schedule
        if schedule is None:
            return None
        return next_tick(
            schedule,
            now=self._services.clock.now(),
            after=entry.after,
            starting_deadline=spec.starting_deadline,
            catch_up=spec.catch_up.policy,
        )

    async def _loop(self) -> None:
        clock = self._services.clock
        while True:
            self._changed.clear()
            plans: dict[tuple[object, ...], NextTick | None] = {}
            for entry in self._entries.values():
                if entry.next is None:
                    # Jobs on the same schedule (all the hourly ones) share one computation.
                    spec = entry.job.spec
                    key: tuple[object, ...] = (spec.schedule, spec.time_zone, entry.after)
                    key += (spec.starting_deadline, spec.catch_up.policy)
                    if key not in plans:
                        plans[key] = self._plan(entry)
                    entry.next = plans[key]
            planned = [e for e in self._entries.values() if e.next is not None]
            if not planned:
                await self._changed.wait()
                continue
            soonest = min(e.next.tick for e in planned if e.next is not None)
            remaining = (soonest - clock.now()).total_seconds()
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), min(remaining, _MAX_SLEEP))
                continue
            self._fire([e for e in planned if e.next is not None and e.next.tick <= clock.now()])
            await asyncio.sleep(0)  # the claims go out before the next ticks are planned

    def _fire(self, due: list[_Entry]) -> None:
        """Hand every due job's tick to its shard's instant claim."""
        groups: dict[tuple[ShardRef, datetime], dict[str, bool]] = {}
        for entry in due:
            assert entry.next is not None
            planned = entry.next
            entry.after, entry.next = planned.tick, None
            if entry.job.spec.suspend:
                self._services.skip(entry.job, SkipReason.SUSPENDED, tick=planned.tick)
                continue
            key = (self.ref_of(entry.job.name), planned.tick)
            groups.setdefault(key, {})[entry.job.name] = planned.catch_up
        by_instant: dict[datetime, dict[ShardRef, Iterable[str]]] = {}
        for (ref, instant), names in groups.items():
            by_instant.setdefault(instant, {})[ref] = names
        for instant, due_then in by_instant.items():
            self._place(instant, due_then)
        for (ref, instant), catch_up in groups.items():
            task = asyncio.get_running_loop().create_task(
                self._instant(ref, instant, catch_up),
                name=f"leasecron shard {ref.lease} {instant.isoformat()}",
            )
            self._instants.add(task)
            task.add_done_callback(self._instants.discard)

    def _place(self, instant: datetime, due: Mapping[ShardRef, Iterable[str]]) -> None:
        """Which live member claims each shard due at `instant` first, so that the instant's
        runs spread evenly over the replicas (`balanced_first`, weighed by the jobs due per
        shard, the jobs whose handlers this replica lacks included)."""
        services = self._services
        weights: dict[str, int] = {}
        handlers: dict[str, set[str]] = {}
        for ref, names in due.items():
            for name in names:
                if name in self._entries:
                    weights[ref.lease] = weights.get(ref.lease, 0) + 1
                    handlers.setdefault(ref.lease, set()).add(self._entries[name].job.handler_name)
        shards = self.state().shards
        for job in self._foreign.values():
            schedule = job.spec.parsed_schedule
            if schedule is None or job.spec.suspend or not due_at(schedule, instant):
                continue
            lease = self._foreign_ref(job.name, shards).lease
            weights[lease] = weights.get(lease, 0) + 1
            handlers.setdefault(lease, set()).add(job.handler_name)
        own, members = services.registry.names(), services.membership.members()
        able = {
            lease: services.membership.members_with(needed, own=own) or members
            for lease, needed in handlers.items()
        }
        claimed_here = {ref.lease for ref in due}
        for lease, member in balanced_first(weights, able).items():
            if lease in claimed_here:
                self._first[(lease, instant)] = member

    # --- one instant of one shard -------------------------------------------------------------

    def _lock(self, ref: ShardRef) -> ShardLock:
        lock = self._locks.get(ref.lease)
        if lock is None:
            services = self._services
            lock = ShardLock(
                services.kube,
                self.view,
                namespace=services.namespace,
                name=ref.lease,
                identity=services.identity,
                clock=services.clock,
                labels=shard_labels(services.group, ref.shard),
                config=shard_config(services.tuning.shard_lease_s),
                group=self.group,
                on_orphan=functools.partial(self._adopt, ref),
            )
            self._locks[ref.lease] = lock
        return lock

    def _due(self, names: Iterable[str], instant: datetime) -> list[_Entry]:
        """The jobs named (still run here) with a tick at `instant`."""
        entries = [self._entries[n] for n in names if n in self._entries]
        due: dict[tuple[str, str], bool] = {}

        def is_due(job: ScheduledJob) -> bool:
            schedule = job.spec.parsed_schedule
            if schedule is None or job.spec.suspend:
                return False
            key = (schedule.expression, schedule.time_zone)
            if key not in due:
                due[key] = due_at(schedule, instant)
            return due[key]

        return [e for e in entries if is_due(e.job)]

    def _of_shard(self, ref: ShardRef) -> list[_Entry]:
        shards = self.state().shards
        return [e for e in self._entries.values() if self._placed(e, shards) == ref]

    def _placed(self, entry: _Entry, shards: int) -> ShardRef:
        if entry.placed is None or entry.placed[0] != shards:
            entry.placed = (shards, shard_ref(self._services.group, entry.job.name, shards=shards))
        return entry.placed[1]

    async def _instant(self, ref: ShardRef, instant: datetime, catch_up: dict[str, bool]) -> None:
        """Claim `instant` of shard Lease `ref` after this replica's claim of its previous
        instant is settled, then run every job of the shard it makes ours."""
        loop = asyncio.get_running_loop()
        previous = self._claiming.get(ref.lease)
        settled: asyncio.Future[None] = loop.create_future()
        self._claiming[ref.lease] = settled
        try:
            if previous is not None:
                await previous
            lock = self._lock(ref)
            due = self._due(catch_up, instant)
            result = await self._claim(lock, ref, instant, due, catch_up, local=True)
            if isinstance(result, _Outage):
                local = [e for e in due if _runs_locally(e.job)]
                runs = [self._run_unguarded(e, instant) for e in local]
                rest = [e for e in due if not _runs_locally(e.job)]
                claim = asyncio.ensure_future(
                    self._claim(lock, ref, instant, rest, catch_up, local=False)
                )
                await asyncio.gather(claim, *runs)
                result, due = claim.result(), rest
            if isinstance(result, Skipped):
                for entry in due:  # skips by reason, per job as well as per shard Lease
                    self._services.skip(entry.job, result.reason, tick=instant)
                return
            if not isinstance(result, Grant):
                return
            await self._hold_and_run(lock, ref, result, due, catch_up, settled=settled)
        finally:
            if not settled.done():
                settled.set_result(None)
            if self._claiming.get(ref.lease) is settled:
                del self._claiming[ref.lease]
            self._first.pop((ref.lease, instant), None)

    async def _claim(
        self,
        lock: ShardLock,
        ref: ShardRef,
        instant: datetime,
        due: list[_Entry],
        catch_up: dict[str, bool],
        *,
        local: bool,
    ) -> Grant | _Outage | Skipped:
        """One claim after the rendezvous stagger among the live members that registered the
        handlers of every job due (none while we hold the shard), again after a live grant
        ends or while the store cannot be reached, until the latest startingDeadline of the
        jobs due (for a catch-up instant: that long from now). Skipped without a claim, also
        when another replica is better placed (it has handlers we lack). `_Outage` (with
        `local`) when the RunLocally jobs due may run unguarded."""
        if not due:
            return Skipped(SkipReason.NOTHING_DUE)
        services = self._services
        clock, tuning = services.clock, services.tuning
        try:
            await self._group_ready()
        except KubeError as e:  # the claim below meets the same failure and reports it
            _log.debug("group record not read yet", group=services.group, error=repr(e))
        needed = self._handlers_due(ref, instant, due)
        able = services.membership.members_with(needed, own=services.registry.names())
        if able and services.identity not in able:
            # Another live replica registered every handler due: it claims the instant,
            # so that no job of the shard goes without a run.
            return Skipped(SKIP_BETTER_PLACED)
        key = shard_key(services.group, ref.lease, instant)
        rank = placed_rank(
            key,
            services.identity,
            able or services.membership.members(),
            first=self._first.get((ref.lease, instant)),
        )
        deadline = max(e.job.spec.starting_deadline for e in due)
        catching = any(catch_up.get(e.job.name, False) for e in due)
        claim_deadline = None if catching else deadline
        give_up = (clock.now() if catching else instant) + deadline
        local_jobs = [e.job for e in due if _runs_locally(e.job)] if local else []
        window = min(
            [tuning.unguarded_after]
            + [j.spec.starting_deadline.total_seconds() / 2 for j in local_jobs]
        )
        outage_since: float | None = None
        lagged = False
        pause = tuning.claim_retry
        stagger = 0.0 if lock.holding() else rank * tuning.claim_step
        above = self._above(e.job.name for e in due)
        result = await lock.try_claim(
            instant, stagger=stagger, starting_deadline=claim_deadline, above=above
        )
        while isinstance(result, Skipped) and result.reason in _RETRIED:
            left = (give_up - clock.now()).total_seconds()
            if result.unreachable:
                outage_since = clock.monotonic() if outage_since is None else outage_since
                out_for = clock.monotonic() - outage_since
                if local_jobs and out_for >= window and not lock.taken_by_other(instant):
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
                if not await lock.wait_claimable(instant, timeout=left):
                    return result
            else:
                wait = pause
                if local_jobs and outage_since is not None:
                    wait = max(0.01, min(pause, window - (clock.monotonic() - outage_since)))
                await asyncio.sleep(wait)
                pause = min(pause * 2, 2.0)
            stagger = 0.0 if lock.holding() else rank * tuning.claim_step
            result = await lock.try_claim(
                instant, stagger=stagger, starting_deadline=claim_deadline, above=above
            )
        return result

    async def _adopt(self, ref: ShardRef, grant: Grant) -> None:
        """A claim of ours whose reply was lost turned out to have landed: run the jobs of its
        instant that can still start (the others are recorded Missed by their own plans),
        then release it."""
        lock = self._locks.get(ref.lease)
        if lock is None:
            await grant.release()
            return
        due = self._due([e.job.name for e in self._of_shard(ref)], grant.tick)
        _log.info(
            "adopting a shard claim whose reply was lost",
            lease=ref.lease,
            tick=grant.tick.isoformat(),
            token=grant.token,
            jobs=len(due),
        )
        await self._hold_and_run(lock, ref, grant, due, {})

    async def _hold_and_run(
        self,
        lock: ShardLock,
        ref: ShardRef,
        grant: Grant,
        due: list[_Entry],
        catch_up: dict[str, bool],
        *,
        settled: asyncio.Future[None] | None = None,
        also: Callable[[Grant], Awaitable[None]] | None = None,
    ) -> None:
        services, instant = self._services, grant.tick
        async with lock.use(grant):
            if settled is not None and not settled.done():
                settled.set_result(None)
            others = [e for e in self._of_shard(ref) if e not in due]
            marks = await self._first_claim_marks(grant, [*due, *others])
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

    async def _first_claim_marks(
        self, grant: Grant, entries: list[_Entry]
    ) -> dict[_Entry, datetime]:
        """For a claim that replaced no instant (its shard Lease is new: the shard count
        changed, the Lease was deleted, or the group record was made for existing jobs), the
        newest instant known claimed per job, which its catch-up is planned from instead of
        its creation: the group record's floor tick, the job's newest run here, else its
        newest JobRun (one read, only for a job with ticks in between). A job whose records
        cannot be read gets the claimed instant: nothing older is run or recorded Missed (the
        operator alarms a tick that has no record)."""
        if grant.replaced_tick is not None:
            return {}
        floor = self.state().floor_tick
        marks: dict[_Entry, datetime] = {}
        unsure: list[_Entry] = []
        for entry in entries:
            schedule = entry.job.spec.parsed_schedule
            known = [t for t in (floor, entry.ran, entry.not_before) if t is not None]
            if schedule is None:
                continue
            if known and schedule.next_after(max(known)) >= grant.tick:
                marks[entry] = max(known)
            else:
                unsure.append(entry)
        gate = asyncio.Semaphore(_MARK_READS)

        async def read(entry: _Entry) -> None:
            try:
                async with gate:
                    recorded = await self._services.recorder.newest_tick(entry.job.name)
            except KubeError as e:
                _log.warning(
                    "a new shard Lease's job records unreadable; no catch-up for its claim",
                    job=entry.job.name,
                    error=repr(e),
                )
                marks[entry] = grant.tick
                return
            known = [t for t in (floor, entry.ran, recorded) if t is not None]
            if known:
                marks[entry] = max(known)

        await asyncio.gather(*(read(e) for e in unsure))
        return marks

    async def _run_due(
        self, entry: _Entry, grant: Grant, *, catch_up: bool, mark: datetime | None
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
        if waited:
            # Not late: the job's earlier run kept it from starting, and the record says so.
            services.skip(job, SkipReason.OVERLAP, tick=instant)
            await services.record_missed(job, [instant], grant.token, reason=MISSED_OVERLAP)
            plan = TickPlan(claimed=instant, run=(), missed=plan.missed)
        elif late and not catch_up:
            services.skip(job, SkipReason.DEADLINE, tick=instant)
            plan = TickPlan(claimed=instant, run=(), missed=(*plan.missed, instant))
        elif not catch_up:
            # The on-time tick first (it has a deadline to keep), then the catch-up runs.
            older = tuple(t for t in plan.run if t != instant)
            plan = TickPlan(claimed=instant, run=(instant, *older), missed=plan.missed)
        await self._start(entry, plan, grant, start_by=None if catch_up else instant)

    async def _run_overtaken(self, entry: _Entry, grant: Grant, *, mark: datetime | None) -> None:
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
        entry: _Entry,
        plan: TickPlan,
        grant: Grant,
        *,
        start_by: datetime | None,
        fresh: bool = False,
    ) -> None:
        if entry.stopped:
            return
        newest = max((plan.claimed, *plan.run, *plan.missed))
        entry.ran = newest if entry.ran is None else max(entry.ran, newest)
        if not plan.run:
            # Nothing to run: the records only; the job's running run (if any) stays its own.
            await self._services.record_missed(
                entry.job, plan.missed, grant.token, reason=MISSED_LATE
            )
            return
        control = RunControl()
        task = asyncio.get_running_loop().create_task(
            self._run_plan(entry.job, plan, grant, control, start_by=start_by, fresh=fresh),
            name=f"leasecron shard run {entry.job.name}",
        )
        entry.earlier.keep(entry.running)
        entry.running = (task, control)
        await asyncio.gather(task, return_exceptions=True)

    async def _previous_done(self, entry: _Entry, instant: datetime) -> bool:
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
        if may and entry.job.spec.concurrency_policy is not ConcurrencyPolicy.ALLOW:
            elsewhere = self._retired_elsewhere(entry.job)
            if elsewhere is not None:
                left = instant + entry.job.spec.starting_deadline - self._services.clock.now()
                free = await elsewhere.wait_free(timeout=max(0.0, left.total_seconds() - 0.1))
                replace = entry.job.spec.concurrency_policy is ConcurrencyPolicy.REPLACE
                may = free or replace
        return entry.earlier.turn(instant) and may

    def _retired_elsewhere(self, job: ScheduledJob) -> ShardLock | None:
        """The retired shard Lease (of an earlier shard count) that claimed `job`'s ticks,
        when another replica holds a live grant on it: its runs may include one of `job`."""
        for ref in self._retired_held():
            if shard_ref(self._services.group, job.name, shards=ref.shards) == ref:
                lock = self._lock(ref)
                if lock.held_by_other():
                    return lock
        return None

    def _retired_held(self) -> list[ShardRef]:
        """The group's retired shard Leases that show another party's grant, read from the
        watched Leases at most every `_RETIRED_TTL` seconds (almost always none)."""
        services = self._services
        now = services.clock.monotonic()
        if self._retired_seen is not None and now - self._retired_seen[0] < _RETIRED_TTL:
            return self._retired_seen[1]
        held = []
        for obj in services.lease_cache.items():
            metadata = obj.get("metadata") or {}
            labels = metadata.get("labels") or {}
            if labels.get(LABEL_GROUP) != services.group or labels.get(LABEL_ROLE) != Role.SHARD:
                continue
            holder = (obj.get("spec") or {}).get("holderIdentity") or ""
            if not holder or holder == services.identity:
                continue
            if not retired(metadata.get("annotations") or {}):
                continue
            ref = self._retired_ref(str(metadata.get("name")), labels.get(LABEL_SHARD, ""))
            if ref is not None:
                held.append(ref)
        self._retired_seen = (now, held)
        return held

    def _retired_ref(self, name: str, index: str) -> ShardRef | None:
        """The ShardRef of a shard Lease named `name` with shard label `index`: its count is
        in its name (looked up once per name)."""
        if name in self._retired_refs:
            return self._retired_refs[name]
        found = None
        if index.isdigit():
            group, shard = self._services.group, int(index)
            for count in range(shard + 1, MAX_SHARDS + 1):
                if shard_lease_name(group, shard, shards=count) == name:
                    found = ShardRef(lease=name, shard=shard, shards=count)
                    break
        self._retired_refs[name] = found
        return found

    async def _run_plan(
        self,
        job: ScheduledJob,
        plan: TickPlan,
        grant: Grant,
        control: RunControl,
        *,
        start_by: datetime | None,
        fresh: bool,
    ) -> None:
        services = self._services
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

    async def _run_unguarded(self, entry: _Entry, instant: datetime) -> None:
        """A RunLocally job's tick while the store is out of reach: run here, unguarded."""
        services, job = self._services, entry.job
        if services.clock.now() > instant + job.spec.starting_deadline or entry.stopped:
            services.skip(job, SkipReason.DEADLINE, tick=instant)
            return
        if not await self._previous_done(entry, instant):
            services.skip(job, SkipReason.OVERLAP, tick=instant)
            return
        entry.remember_unguarded(instant)
        control = RunControl()

        async def run() -> None:
            await services.run_tick(
                job,
                instant,
                control,
                fence=None,
                record=RecordMode.UNGUARDED,
                start_by=instant + job.spec.starting_deadline,
            )

        task = asyncio.get_running_loop().create_task(
            run(), name=f"leasecron unguarded run {job.name}"
        )
        entry.earlier.keep(entry.running)
        entry.running = (task, control)
        await asyncio.gather(task, return_exceptions=True)


def _unclaimed_before(grant: Grant) -> bool:
    """Whether no Lease could have claimed `grant`'s instant before it: the claim replaced a
    Lease that never recorded an instant, made (by the API server's clock) well before the
    instant. A Lease of the same name before it was gone by then, and no replica claims an
    instant before it comes by the store's clock; Leases of another shard count are below
    the group's floor tick. `_FRESH_MARGIN` covers the creation time's whole seconds and the
    estimate of the store's clock."""
    created = grant.lease_created
    return created is not None and grant.tick > created + _FRESH_MARGIN


def _runs_locally(job: ScheduledJob) -> bool:
    return job.spec.on_store_unavailable is StoreUnavailablePolicy.RUN_LOCALLY


__all__ = ["MISSED_LATE", "ShardTicks"]
