"""`ShardTicks`: the once-per-tick jobs of this replica's group that are claimed through
shards (docs/claims.md), with one timer for all of them and one claim per shard and instant.

One loop sleeps until the soonest tick of any sharded job (one timer per instant, not one
coroutine per job), takes every job due then, groups them by the shard Lease its own Lease
hands it to (`_handover`: its gate, whatever this replica's shard count) and, per shard Lease,
claims the instant after its rendezvous stagger (`ShardLock`). The replica that
wins runs every job of the shard due at that instant, each through the one run-a-tick path
(`Services.run_tick`) with the shard grant's token and its record written off the start path
(`RecordMode.DEFERRED`), after catch-up per job planned from the shard's high-water mark
(the instant the claim replaced). Each run is bounded by its job's atMostFor and stops when
the shard is lost; a job never overlaps itself here (a tick that comes while the job's
previous run still goes waits for it until its startingDeadline, else it is recorded Missed).

While the store cannot be reached a claim is retried until the instant's startingDeadline
(sharded jobs are `onStoreUnavailable: Skip` ones; see `models.shards`). It does not decide
which jobs are sharded, and it does not run every-replica or per-job claims (`_ticks`, `_once`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from leasecron._logs import get_logger
from leasecron.coordination import Grant, Skipped
from leasecron.coordination.locks import SKIP_UNAVAILABLE, SKIP_UNCERTAIN
from leasecron.coordination.shards import ShardLock, shard_config, shard_labels
from leasecron.models.decisions import SKIP_LIVE_GRANT, rendezvous_rank
from leasecron.models.shards import ShardRef, due_at, runs_under_shard, shard_key
from leasecron.models.specs import ScheduledJob
from leasecron.runtime._handover import Handovers, lease_view
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._planning import (
    NextTick,
    TickPlan,
    jitter_delay,
    next_tick,
    plan_claimed,
)
from leasecron.runtime._services import RecordMode, Services
from leasecron.runtime._shardfences import RunFence, ShardFloors
from leasecron.runtime._ticks import stop_run

_log = get_logger("leasecron.runtime.shards")
_MAX_SLEEP = 30.0
_RETRIED = (SKIP_LIVE_GRANT, SKIP_UNAVAILABLE, SKIP_UNCERTAIN)
"""Skips after which a shard instant is claimed again (until its startingDeadline)."""
_GATE_WAIT = 2.0
"""Seconds a run waits for its job's gate to show up in this replica's view."""
SKIP_NOT_HANDED_OVER = "not_handed_over"
"""The job's Lease does not hand this tick to the shard Lease claimed (yet, or any more)."""


@dataclass(eq=False)
class _Entry:
    job: ScheduledJob
    after: datetime
    not_before: datetime
    next: NextTick | None = None
    running: tuple[asyncio.Task[None], RunControl] | None = None
    stopped: bool = field(default=False)


class ShardTicks:
    """The sharded once-per-tick jobs of one running Scheduler."""

    def __init__(self, services: Services, *, shards: int) -> None:
        self._services = services
        self.shards = shards
        self._entries: dict[str, _Entry] = {}
        self._foreign: dict[str, ScheduledJob] = {}
        self._locks: dict[str, ShardLock] = {}
        self._changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._instants: set[asyncio.Task[None]] = set()
        self._floors = ShardFloors(services)
        self._claiming: dict[str, asyncio.Future[None]] = {}
        """Per shard: settled once this replica's claim of its latest instant is."""

    @functools.cached_property
    def handovers(self) -> Handovers:
        """The gates of this replica's sharded jobs (made on first use)."""
        return Handovers(self._services, shards=self.shards, view=lease_view(self._services))

    # --- the jobs ---------------------------------------------------------------------------

    def add(self, job: ScheduledJob, *, created: datetime) -> None:
        self._entries[job.name] = _Entry(job=job, after=created, not_before=created)
        self.handovers.want(job, not_before=created)
        self._wake()

    def update(self, job: ScheduledJob) -> None:
        entry = self._entries.get(job.name)
        if entry is None:
            return
        if entry.job.spec.suspend and not job.spec.suspend:
            entry.not_before = max(entry.not_before, self._services.clock.now())
        if job.spec != entry.job.spec:
            # A spec change (not a status update) is when a job taken back by a replica that
            # claims it per job may be handed to a shard again.
            self.handovers.want(job, not_before=entry.not_before)
        entry.job, entry.next = job, None
        self._wake()

    async def remove(self, name: str, reason: StopReason) -> None:
        entry = self._entries.pop(name, None)
        self.handovers.drop(name)
        if entry is not None:
            entry.stopped = True
            await self._stop_running(entry, reason)

    def note_foreign(self, job: ScheduledJob) -> None:
        """A sharded job of the group whose handler is not registered here: this replica does
        not run it, and steps back from claiming its shard's instants when it is due."""
        self._foreign[job.name] = job

    def forget_foreign(self, name: str) -> None:
        self._foreign.pop(name, None)

    def _handlers_due(self, ref: ShardRef, instant: datetime, due: list[_Entry]) -> set[str]:
        """Handlers of every job of shard Lease `ref` due at `instant`, registered here or
        not."""
        handlers = {e.job.handler_name for e in due}
        for job in self._foreign.values():
            schedule = job.spec.parsed_schedule
            if schedule is None or job.spec.suspend:
                continue
            if self.handovers.ref_of(job.name) == ref and due_at(schedule, instant):
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
        if "handovers" in self.__dict__:
            await self.handovers.close()

    async def _stop_running(self, entry: _Entry, reason: StopReason) -> None:
        await stop_run(entry.running, reason=reason, grace=self._services.grace_period)

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
        ticks: dict[str, NextTick] = {}
        for entry in due:
            assert entry.next is not None
            ticks[entry.job.name] = entry.next
            entry.after, entry.next = entry.next.tick, None
            if entry.job.spec.suspend:
                self._services.skip(entry.job, "suspended", tick=entry.after)
                ticks.pop(entry.job.name)
        groups: dict[tuple[ShardRef, datetime], list[str]] = {}
        handovers = self.handovers
        for name, planned in ticks.items():
            gate = handovers.gate_of(name)
            if gate is None and not handovers.pending(name):
                entry = self._entries[name]
                if handovers.needs_gate(name):
                    # Its Lease was deleted, created afresh, or its gate is corrupt.
                    handovers.want(entry.job, not_before=entry.not_before)
                else:
                    # Its own Lease claims its ticks: a replica that claims it per job took
                    # them back. Not claimed here until its spec changes again.
                    self._services.skip(entry.job, SKIP_NOT_HANDED_OVER, tick=planned.tick)
                    continue
            ref = gate.ref if gate is not None else handovers.target(name)
            key = (ref, planned.tick)
            groups.setdefault(key, []).append(name)
        for (ref, instant), names in groups.items():
            catch_up = any(ticks[n].catch_up for n in names)
            task = asyncio.get_running_loop().create_task(
                self._instant(ref, instant, sorted(names), catch_up=catch_up),
                name=f"leasecron shard {ref.lease} {instant.isoformat()}",
            )
            self._instants.add(task)
            task.add_done_callback(self._instants.discard)

    # --- one instant of one shard -------------------------------------------------------------

    def _lock(self, ref: ShardRef) -> ShardLock:
        lock = self._locks.get(ref.lease)
        if lock is None:
            services = self._services
            lock = ShardLock(
                services.kube,
                self.handovers.view,
                namespace=services.namespace,
                name=ref.lease,
                identity=services.identity,
                clock=services.clock,
                labels=shard_labels(services.group, ref.shard),
                config=shard_config(services.tuning.shard_lease_s),
                floor=functools.partial(self._floors.floor, ref),
            )
            self._locks[ref.lease] = lock
        return lock

    def _due(self, names: list[str], instant: datetime) -> list[_Entry]:
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

    def _deadline(self, entries: list[_Entry]) -> timedelta:
        return min((e.job.spec.starting_deadline for e in entries), default=timedelta(seconds=60))

    async def _instant(
        self, ref: ShardRef, instant: datetime, names: list[str], *, catch_up: bool
    ) -> None:
        """Claim `instant` of shard Lease `ref` after this replica's claim of its previous
        instant is settled (a later instant claimed first would make the earlier one taken),
        then run every job of the shard due at it."""
        loop = asyncio.get_running_loop()
        previous = self._claiming.get(ref.lease)
        settled: asyncio.Future[None] = loop.create_future()
        self._claiming[ref.lease] = settled
        try:
            if previous is not None:
                await previous
            lock = self._lock(ref)
            grant = await self._claim(lock, ref, instant, names, catch_up=catch_up)
            if grant is None:
                return
            async with lock.use(grant):
                settled.set_result(None)
                due = self._due(names, instant)
                released = lock.released(grant)
                _log.debug(
                    "shard instant claimed",
                    lease=ref.lease,
                    tick=instant.isoformat(),
                    token=grant.token,
                    jobs=len(due),
                )
                await asyncio.gather(
                    *(
                        self._run_job(entry, grant, instant, ref, released, catch_up=catch_up)
                        for entry in due
                    )
                )
        finally:
            if not settled.done():
                settled.set_result(None)
            if self._claiming.get(ref.lease) is settled:
                del self._claiming[ref.lease]

    async def _claim(
        self, lock: ShardLock, ref: ShardRef, instant: datetime, names: list[str], *, catch_up: bool
    ) -> Grant | None:
        """One claim after the rendezvous stagger among the live members that registered the
        handlers of every job due (none while we hold the shard), again after a live grant
        ends or while the store cannot be reached, until the startingDeadline. None without
        a claim, also when another replica is better placed (it has handlers we lack)."""
        services = self._services
        due = self._due(names, instant)
        needed = self._handlers_due(ref, instant, due)
        able = services.membership.members_with(needed, own=services.registry.names())
        if able and services.identity not in able:
            # Another live replica registered every handler due: it claims the instant,
            # so that no job of the shard goes without a run.
            return None
        key = shard_key(services.group, ref.lease, instant)
        rank = rendezvous_rank(key, services.identity, able or services.membership.members())
        deadline = self._deadline(due)
        claim_deadline = None if catch_up else deadline
        stagger = 0.0 if lock.holding() else rank * services.tuning.claim_step
        # A job handed over from its own Lease keeps a token that only grows.
        gates = (self.handovers.gate_of(e.job.name) for e in due)
        above = max((g.token for g in gates if g is not None and g.lease == ref.lease), default=0)
        result = await lock.try_claim(
            instant, stagger=stagger, starting_deadline=claim_deadline, above=above
        )
        pause = services.tuning.claim_retry
        while isinstance(result, Skipped) and result.reason in _RETRIED:
            left = (instant + deadline - services.clock.now()).total_seconds()
            if not catch_up and left <= pause:
                return None
            if result.reason == SKIP_LIVE_GRANT:
                # The holder of the previous instant takes this one too, normally; if it
                # cannot (it died, or lost a race), the shard is free or expires first.
                if not await lock.wait_claimable(instant, timeout=max(left, pause)):
                    return None
            else:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
            stagger = 0.0 if lock.holding() else rank * services.tuning.claim_step
            result = await lock.try_claim(
                instant, stagger=stagger, starting_deadline=claim_deadline, above=above
            )
        return result if isinstance(result, Grant) else None

    async def _run_job(
        self,
        entry: _Entry,
        grant: Grant,
        instant: datetime,
        ref: ShardRef,
        released: dict[str, datetime] | None,
        *,
        catch_up: bool,
    ) -> None:
        services, job = self._services, entry.job
        schedule = job.spec.parsed_schedule
        assert schedule is not None
        # The job's Lease says which ticks this shard Lease may run: a gate written just now
        # (the job is new here) may still be on its way to this replica's view.
        left = instant + job.spec.starting_deadline - services.clock.now()
        within = min(_GATE_WAIT, max(0.0, left.total_seconds()))
        gate = await self.handovers.wait_gate(job.name, within=within)
        if not runs_under_shard(
            job.name, instant, gate=gate, lease=ref.lease, released=released, token=grant.token
        ):
            # Its own Lease (or another shard Lease) claims this tick: not ours to run.
            _log.debug(
                "tick not run under this shard",
                job=job.name,
                lease=ref.lease,
                tick=instant.isoformat(),
                gate=gate.lease if gate is not None else None,
                released=released is None or job.name in released,
            )
            services.skip(job, SKIP_NOT_HANDED_OVER, tick=instant)
            return
        assert gate is not None
        plan = plan_claimed(
            schedule,
            claimed=instant,
            previous=grant.replaced_tick,
            previous_ran=not grant.replaced_unrun,
            not_before=entry.not_before,
            catch_up=job.spec.catch_up.policy,
            max_ticks=job.spec.catch_up.max_ticks,
        ).from_start(gate.start)
        late = services.clock.now() > instant + job.spec.starting_deadline
        if not await self._previous_done(entry, instant) or (late and not catch_up):
            services.skip(job, "overlap" if not late else "deadline", tick=instant)
            plan = TickPlan(claimed=instant, run=(), missed=(*plan.missed, instant))
        if entry.stopped:
            return
        control = RunControl()
        task = asyncio.get_running_loop().create_task(
            self._run_plan(job, plan, grant, control), name=f"leasecron shard run {job.name}"
        )
        entry.running = (task, control)
        await asyncio.gather(task, return_exceptions=True)

    async def _previous_done(self, entry: _Entry, instant: datetime) -> bool:
        if entry.running is None or entry.running[0].done():
            return True
        left = instant + entry.job.spec.starting_deadline - self._services.clock.now()
        await asyncio.wait([entry.running[0]], timeout=max(0.0, left.total_seconds()))
        return entry.running[0].done()

    async def _run_plan(
        self, job: ScheduledJob, plan: TickPlan, grant: Grant, control: RunControl
    ) -> None:
        services = self._services
        fence = RunFence(grant, at_most_for=job.spec.lock.at_most_for, clock=services.clock)
        unlink = services.stop_when_lost(fence.lost, control)
        watchdog = asyncio.get_running_loop().create_task(fence.watch())
        try:
            await services.run_plan(
                job,
                plan,
                control,
                fence=fence,
                record=lambda t: RecordMode.DEFERRED if t == plan.claimed else RecordMode.GUARDED,
                observe_lag=lambda t: t == plan.claimed,
                delay=lambda t: (
                    jitter_delay(job.name, t, job.spec.jitter) if t == plan.claimed else 0.0
                ),
            )
        finally:
            watchdog.cancel()
            unlink()
            fence.close()
