"""The runtime's one tick timer (`_shards.ShardTicks`, docs/design.md §5.3 step 1): `ShardTimer`
sleeps until the soonest tick of any scheduled job run here (jobs on one schedule share one
tick computation), takes every job due then, groups the once-per-tick ones by shard Lease and
instant, places the member that claims each shard first (`balanced_first`, so that an instant's
runs spread evenly over the replicas) and hands each shard instant to its claim
(`_shard_claims`) in a task of its own. An every-replica job's tick goes to the same run path
without a claim (`ShardRuns.run_here`). The grouping and placement are prepared up to
`_PREPARE_S` before the instant (again if the jobs change meanwhile): work that grows with the
jobs due is not done between the instant and its claims, where a replica slower than the others
at it would lose the claims it was placed to make. A suspended job's tick is skipped here.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from leasecron.models.decisions import balanced_first
from leasecron.models.leases import lease_annotations
from leasecron.models.names import ANNOTATION_CLAIMER
from leasecron.models.shards import ShardRef, due_at
from leasecron.models.specs import Bucket, CatchUpPolicy, ScheduledJob
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._planning import NextTick, next_tick
from leasecron.runtime._services import Services
from leasecron.runtime._shard_claims import ShardClaims
from leasecron.runtime._shard_group import ShardGroup
from leasecron.runtime._shard_jobs import JobEntry, ShardJobs
from leasecron.runtime._shard_runs import ShardRuns
from leasecron.runtime._tick_records import RecordMode

_MAX_SLEEP = 30.0
_PREPARE_S = 1.0
"""How long before an instant its claims are prepared (grouped by shard, placed)."""
_LEAD_S = 0.01
_LEAD_PER_JOB_S = 1e-5
"""How long before an instant its claims and runs are launched (`_LEAD_S`, and this much per
job due then): each waits for the instant itself (plus its stagger or jitter), so what
launching costs, and the work of a claim before its write, is not on the instant's clock (on
a replica of 10,000 jobs due at once, 30-50 ms on a busy machine)."""
_SETTLED = timedelta(seconds=3)
"""How long before an instant a shard's previous instant must be for its claimer to place it
(`ShardTimer._claimer`)."""
_PLAN_BATCH = 500
"""Jobs planned between two turns of the loop: planning the next ticks of an instant's jobs
comes right after its claims are launched, and must not hold up their writes."""

Spawn = Callable[[Coroutine[Any, Any, None], str], None]
"""Runs a shard instant's claim in a task of the engine's (named by the second argument)."""


@dataclass(frozen=True)
class _Prepared:
    """An instant's claims, prepared: the jobs due, their ticks by shard Lease and instant
    (with catch-up per job) and the member placed to claim each first."""

    due: list[JobEntry]
    groups: dict[tuple[ShardRef, datetime], dict[str, bool]]
    first: dict[tuple[str, datetime], tuple[str, int]]
    """Per shard Lease and instant: the member placed first, and the jobs due at the instant."""


class ShardTimer:
    """The timer of every scheduled job this replica runs (once-per-tick, every-replica)."""

    def __init__(
        self,
        services: Services,
        jobs: ShardJobs,
        group: ShardGroup,
        claims: ShardClaims,
        runs: ShardRuns,
        *,
        spawn: Spawn,
    ) -> None:
        self._services = services
        self._jobs = jobs
        self._group = group
        self._claims = claims
        self._runs = runs
        self._spawn = spawn
        self._changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._queued: list[tuple[datetime, int, JobEntry]] = []
        """The planned jobs by next tick (a heap); an item whose entry was planned again,
        replaced or removed since is dropped when it comes up."""
        self._order = 0

    def wake(self) -> None:
        """The jobs changed: plan again (the timer starts on the first)."""
        self._changed.set()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(
                self._loop(), name="leasecron shard ticks"
            )

    async def close(self) -> None:
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _plan(self, entry: JobEntry) -> NextTick | None:
        spec = entry.job.spec
        schedule = spec.parsed_schedule
        if schedule is None:
            return None
        return next_tick(
            schedule,
            now=self._services.clock.now(),
            after=entry.after,
            starting_deadline=spec.starting_deadline,
            catch_up=_catch_up(entry.job),
        )

    async def _loop(self) -> None:
        clock = self._services.clock
        while True:
            self._changed.clear()
            await self._plan_changed()
            soonest = self._soonest()
            if soonest is None:
                await self._changed.wait()
                continue
            remaining = (soonest - clock.now()).total_seconds()
            if remaining > _PREPARE_S:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._changed.wait(), min(remaining - _PREPARE_S, _MAX_SLEEP)
                    )
                continue
            if remaining > 0:
                # The instant's grouping and placement are done before it comes, so that the
                # claims go out as it does (a large group's work per job is not on the clock).
                due = self._take_due(soonest)
                prepared = self._prepare(due)
                lead = min(_LEAD_S + _LEAD_PER_JOB_S * len(due), _PREPARE_S / 2)
                remaining = (soonest - clock.now()).total_seconds() - lead
                if remaining > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), remaining)
                        for entry in due:  # the jobs changed: plan again
                            self._queue(entry)
                        continue
            else:
                prepared = self._prepare(self._take_due(clock.now()))
            self._launch(prepared)
            await asyncio.sleep(0)  # the claims start before the next ticks are planned

    async def _plan_changed(self) -> None:
        """Plan the next tick of every job new, changed or just due (jobs on the same
        schedule share one computation) and queue it: the work per wake-up is that of the
        jobs that changed, not of all of them. The loop turns every `_PLAN_BATCH` jobs, so
        the claims just launched are written meanwhile."""
        plans: dict[tuple[object, ...], NextTick | None] = {}
        changed, self._jobs.unplanned = self._jobs.unplanned, []
        for count, entry in enumerate(changed, 1):
            if count % _PLAN_BATCH == 0:
                await asyncio.sleep(0)
            if entry.next is not None or not self._jobs.current(entry):
                continue
            spec = entry.job.spec
            key: tuple[object, ...] = (spec.schedule, spec.time_zone, entry.after)
            key += (spec.starting_deadline, _catch_up(entry.job))
            if key not in plans:
                plans[key] = self._plan(entry)
            entry.next = plans[key]
            self._queue(entry)

    def _queue(self, entry: JobEntry) -> None:
        if entry.next is not None:
            self._order += 1
            entry.timed_as = self._order
            heapq.heappush(self._queued, (entry.next.tick, self._order, entry))

    def _current(self, item: tuple[datetime, int, JobEntry]) -> bool:
        """Whether a queue item is its entry's latest plan and the entry is still here."""
        tick, order, entry = item
        planned = entry.next
        current = planned is not None and planned.tick == tick and entry.timed_as == order
        return current and self._jobs.current(entry)

    def _soonest(self) -> datetime | None:
        queued = self._queued
        while queued and not self._current(queued[0]):
            heapq.heappop(queued)
        return queued[0][0] if queued else None

    def _take_due(self, until: datetime) -> list[JobEntry]:
        """The jobs planned at or before `until`, out of the queue (put back by `_queue`)."""
        queued, due = self._queued, []
        while queued and queued[0][0] <= until:
            item = heapq.heappop(queued)
            if self._current(item):
                due.append(item[2])
        return due

    def _prepare(self, due: list[JobEntry]) -> _Prepared:
        """Group every due job's tick by shard Lease and instant, and place the member that
        claims each first; changes nothing."""
        groups: dict[tuple[ShardRef, datetime], dict[str, bool]] = {}
        state = self._group.state()
        for entry in due:
            assert entry.next is not None
            if not entry.job.spec.suspend and entry.job.spec.bucket is Bucket.ONCE_PER_TICK:
                ref = self._jobs.placed(entry, state)
                groups.setdefault((ref, entry.next.tick), {})[entry.job.name] = entry.next.catch_up
        by_instant: dict[datetime, dict[ShardRef, Iterable[str]]] = {}
        for (ref, instant), names in groups.items():
            by_instant.setdefault(instant, {})[ref] = names
        first = {
            (lease, instant): placed
            for instant, due_then in by_instant.items()
            for lease, placed in self._place(instant, due_then).items()
        }
        return _Prepared(due=due, groups=groups, first=first)

    def _launch(self, prepared: _Prepared) -> None:
        """Hand every due job's tick to its shard's instant claim."""
        for entry in prepared.due:
            planned = entry.next
            if planned is None:
                continue
            entry.after, entry.next = planned.tick, None
            self._jobs.unplanned.append(entry)
            if entry.job.spec.suspend:
                self._services.skip(entry.job, SkipReason.SUSPENDED, tick=planned.tick)
            elif entry.job.spec.bucket is Bucket.EVERY_REPLICA:
                self._spawn(
                    self._runs.run_here(entry, planned.tick, record=RecordMode.NONE),
                    f"leasecron tick {entry.job.name} {planned.tick.isoformat()}",
                )
        for (lease, instant), (member, jobs_due) in prepared.first.items():
            self._claims.place_first(lease, instant, member, jobs_due=jobs_due)
        me = self._services.identity
        # The claims this replica is placed to make first go out first.
        ordered = sorted(
            prepared.groups.items(),
            key=lambda item: prepared.first.get((item[0][0].lease, item[0][1]), ("",))[0] != me,
        )
        for (ref, instant), catch_up in ordered:
            self._spawn(
                self._claims.instant(ref, instant, catch_up),
                f"leasecron shard {ref.lease} {instant.isoformat()}",
            )

    def _place(
        self, instant: datetime, due: Mapping[ShardRef, Iterable[str]]
    ) -> dict[str, tuple[str, int]]:
        """Which live member claims each shard due at `instant` first, so that the instant's
        runs spread evenly over the replicas (`balanced_first`, weighed by the jobs due per
        shard, the jobs whose handlers this replica lacks included; a shard stays with the
        member that claimed it last while the spread allows), with the jobs due in the group
        at the instant."""
        services, entries = self._services, self._jobs.entries
        weights: dict[str, int] = {}
        handlers: dict[str, set[str]] = {}
        for ref, names in due.items():
            jobs = [entries[name].job for name in names if name in entries]
            if jobs:
                weights[ref.lease] = weights.get(ref.lease, 0) + len(jobs)
                handlers.setdefault(ref.lease, set()).update(j.spec.handler or j.name for j in jobs)
        state = self._group.state()
        for job in self._jobs.foreign.values():
            schedule = job.spec.parsed_schedule
            if schedule is None or job.spec.suspend or not due_at(schedule, instant):
                continue
            lease = self._jobs.foreign_ref(job.name, state).lease
            weights[lease] = weights.get(lease, 0) + 1
            handlers.setdefault(lease, set()).add(job.handler_name)
        own, members = services.registry.name_set(), services.membership.members()
        able = {
            lease: services.membership.members_with(needed, own=own) or members
            for lease, needed in handlers.items()
        }
        claimed_here, total = {ref.lease for ref in due}, sum(weights.values())
        previous = {lease: who for lease in weights if (who := self._claimer(lease, instant))}
        placed = balanced_first(weights, able, previous)
        return {lease: (member, total) for lease, member in placed.items() if lease in claimed_here}

    def _claimer(self, lease: str, instant: datetime) -> str | None:
        """Who claimed the shard Lease's latest instant (its claimer annotation, kept when
        the grant is released), if that instant is `_SETTLED` or more before `instant`: every
        replica places from the same claimers only if their views agree, and a claim of the
        instant just before (a schedule of a second or two) may be in flight while the next
        is placed. None otherwise: the shard is placed as if new."""
        seen = self._group.view.seen(self._services.namespace, lease)
        if seen is None or (tick := seen.observation.record.tick) is None:
            return None
        if tick > instant - _SETTLED:
            return None
        claimer = lease_annotations(seen.obj).get(ANNOTATION_CLAIMER)
        return claimer if isinstance(claimer, str) else None


def _catch_up(job: ScheduledJob) -> CatchUpPolicy:
    """An every-replica job has no shared record of missed ticks: it never catches up."""
    if job.spec.bucket is Bucket.EVERY_REPLICA:
        return CatchUpPolicy.NONE
    return job.spec.catch_up.policy
