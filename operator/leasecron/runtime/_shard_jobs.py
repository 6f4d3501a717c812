"""The claim engine's jobs (`_shards.ShardTicks`): `JobEntry`, one per scheduled job run here
(its next tick, its runs, and for a once-per-tick job the shard Lease it was placed on), and
`ShardJobs`, the table of them: the once-per-tick ones (`entries`), the every-replica ones
(`local`: the same timer and run path, no claim), and the group's once-per-tick jobs whose
handlers this replica lacks (foreign jobs: not run here, but they weigh on the placement of
an instant and decide who may claim it).

Which shard Lease claims a job's ticks is a stable hash of its name over the group's shard
count; every question that depends on the count takes it as a value (the group record's,
`_shard_group.ShardGroup.state`). It claims, plans and runs nothing itself.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from leasecron.models.groups import GroupState, Placement
from leasecron.models.shards import ShardRef, due_at
from leasecron.models.specs import Bucket, ScheduledJob
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._overlap import Overlapping, stop_run
from leasecron.runtime._planning import NextTick
from leasecron.runtime._services import Services

_UNGUARDED_MEMORY = 1000
"""Ticks run unguarded that a job remembers (to leave them out of catch-up)."""


@dataclass(eq=False)
class JobEntry:
    job: ScheduledJob
    after: datetime
    not_before: datetime
    next: NextTick | None = None
    running: tuple[asyncio.Task[None], RunControl] | None = None
    earlier: Overlapping = field(default_factory=Overlapping)
    """Runs of earlier ticks still going beside `running` (concurrencyPolicy: Allow)."""
    stopped: bool = field(default=False)
    unguarded: OrderedDict[datetime, None] = field(default_factory=OrderedDict)
    placed: tuple[Placement, ShardRef] | None = None
    """The shard Lease of the job under the shard count it was computed for."""
    ran: datetime | None = None
    """The newest tick of the job this replica ran or recorded under a grant."""
    ran_token: int = 0
    """The fencing token of that grant."""
    timed_as: int = 0
    """Which of the timer's queue items for this entry is current (`_shard_timer`)."""

    def remember_unguarded(self, tick: datetime) -> None:
        self.unguarded[tick] = None
        while len(self.unguarded) > _UNGUARDED_MEMORY:
            self.unguarded.popitem(last=False)


def staying(entries: Iterable[JobEntry], moved: frozenset[str]) -> list[JobEntry]:
    """Of `entries`, those a claim on a shard Lease that marks `moved` runs or records: a
    moved job is claimed on its own Lease (`models.groups.own_ref`), nothing of it here."""
    return [e for e in entries if e.job.name not in moved]


@dataclass
class _ShardIndex:
    placement: Placement
    own: dict[str, list[str]] = field(default_factory=dict)
    foreign: dict[str, list[str]] = field(default_factory=dict)


class ShardJobs:
    """The scheduled jobs of the group this replica knows: once-per-tick ones run here
    (`entries`) or not (`foreign`), and every-replica ones (`local`)."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self.entries: dict[str, JobEntry] = {}
        self.local: dict[str, JobEntry] = {}
        """The every-replica jobs: timed with the others, run here without a claim."""
        self.foreign: dict[str, ScheduledJob] = {}
        self._foreign_placed: dict[str, tuple[Placement, ShardRef]] = {}
        """Per foreign job: the placement and the shard Lease it was placed on last."""
        self._index: _ShardIndex | None = None
        self.unplanned: list[JobEntry] = []
        """Entries whose next tick the timer has to plan (new, changed or just due), in
        the order they came."""
        """The jobs' names by shard Lease under one count, made again when the names change:
        a shard's jobs are found without going through the whole group's."""

    def ref_of(self, name: str, state: GroupState) -> ShardRef:
        """The shard Lease that claims the ticks of the job named `name` under `state`."""
        entry = self.entries.get(name)
        if entry is not None:
            return self.placed(entry, state)
        return state.ref(self._services.group, name)

    def timed(self) -> list[JobEntry]:
        """Every job whose ticks the timer plans: once-per-tick and every-replica."""
        return [*self.entries.values(), *self.local.values()]

    def add(self, job: ScheduledJob, *, created: datetime) -> None:
        entry = JobEntry(job=job, after=created, not_before=created)
        if job.spec.bucket is Bucket.EVERY_REPLICA:
            self.local[job.name] = entry
            self.unplanned.append(entry)
        else:
            self.put(entry)

    def put(self, entry: JobEntry) -> None:
        """A once-per-tick job's entry, in place of any it had."""
        self.entries[entry.job.name] = entry
        self._index = None
        self.unplanned.append(entry)

    def current(self, entry: JobEntry) -> bool:
        """Whether `entry` is still its job's here (not removed nor replaced)."""
        name = entry.job.name
        return self.entries.get(name) is entry or self.local.get(name) is entry

    def update(self, job: ScheduledJob) -> bool:
        """The job's new spec; False when it is not run here."""
        entry = self.entries.get(job.name) or self.local.get(job.name)
        if entry is None:
            return False
        if entry.job.spec.suspend and not job.spec.suspend:
            entry.not_before = max(entry.not_before, self._services.clock.now())
        entry.job, entry.next = job, None
        self.unplanned.append(entry)
        return True

    async def remove(self, name: str, reason: StopReason) -> None:
        entry = self.entries.pop(name, None) or self.local.pop(name, None)
        self._index = None
        if entry is not None:
            entry.stopped = True
            await self._stop_running(entry, reason)

    async def close(self, reason: StopReason) -> None:
        """Forget every job and stop its runs."""
        entries, self.entries, self.local, self._index = self.timed(), {}, {}, None
        self.unplanned = []
        await asyncio.gather(*(self._stop_running(e, reason) for e in entries))

    async def _stop_running(self, entry: JobEntry, reason: StopReason) -> None:
        grace = self._services.grace_period
        runs = [entry.running, *entry.earlier.runs()]
        await asyncio.gather(*(stop_run(run, reason=reason, grace=grace) for run in runs))

    def track(self, name: str, run: tuple[asyncio.Task[None], RunControl]) -> None:
        """A run of job `name` made outside its ticks here (a retry handed over from a
        vanished holder): the job's later ticks see it as they see their own earlier runs
        (concurrencyPolicy Forbid waits for it, Replace stops it)."""
        entry = self.entries.get(name)
        if entry is not None:
            entry.earlier.keep(run)

    def note_foreign(self, job: ScheduledJob) -> None:
        """A once-per-tick job of the group whose handler is not registered here: this replica
        does not run it, and steps back from claiming its shard's instants when it is due."""
        if job.name not in self.foreign:
            self._index = None
        self.foreign[job.name] = job

    def forget_foreign(self, name: str) -> None:
        if self.foreign.pop(name, None) is not None:
            self._index = None
        self._foreign_placed.pop(name, None)

    def foreign_ref(self, name: str, state: GroupState) -> ShardRef:
        placed = self._foreign_placed.get(name)
        if placed is None or placed[0] != state.placement:
            placed = self._foreign_placed[name] = (
                state.placement,
                state.ref(self._services.group, name),
            )
        return placed[1]

    def handlers_due(
        self, ref: ShardRef, instant: datetime, due: list[JobEntry], state: GroupState
    ) -> set[str]:
        """Handlers of every job of shard Lease `ref` due at `instant`, registered here or
        not."""
        handlers = {e.job.handler_name for e in due}
        for job in self.foreign_of_shard(ref, state):
            schedule = job.spec.parsed_schedule
            if schedule is not None and not job.spec.suspend and due_at(schedule, instant):
                handlers.add(job.handler_name)
        return handlers

    def due(self, names: Iterable[str], instant: datetime) -> list[JobEntry]:
        """The jobs named (still run here) with a tick at `instant`."""
        entries = [self.entries[n] for n in names if n in self.entries]
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

    def of_shard(self, ref: ShardRef, state: GroupState) -> list[JobEntry]:
        """The jobs run here whose ticks shard Lease `ref` claims under `state`."""
        names = self._indexed(state).own.get(ref.lease, ())
        return [self.entries[name] for name in names]

    def foreign_of_shard(self, ref: ShardRef, state: GroupState) -> list[ScheduledJob]:
        """The group's jobs not run here whose ticks shard Lease `ref` claims."""
        return [self.foreign[name] for name in self._indexed(state).foreign.get(ref.lease, ())]

    def _indexed(self, state: GroupState) -> _ShardIndex:
        index = self._index
        if index is None or index.placement != state.placement:
            index = self._index = _ShardIndex(state.placement)
            for name, entry in self.entries.items():
                index.own.setdefault(self.placed(entry, state).lease, []).append(name)
            for name in self.foreign:
                index.foreign.setdefault(self.foreign_ref(name, state).lease, []).append(name)
        return index

    def placed(self, entry: JobEntry, state: GroupState) -> ShardRef:
        if entry.placed is None or entry.placed[0] != state.placement:
            entry.placed = (state.placement, state.ref(self._services.group, entry.job.name))
        return entry.placed[1]
