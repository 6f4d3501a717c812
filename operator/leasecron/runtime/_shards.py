"""`ShardTicks`: the once-per-tick jobs of this replica's group that are claimed through
shards (docs/claims.md), with one timer for all of them and one claim per shard and instant.

One loop sleeps until the soonest tick of any sharded job (one timer per instant, not one
coroutine per job), takes every job due then, groups them by shard and, per shard, claims the
instant on the shard's Lease after its rendezvous stagger (`ShardLock`). The replica that
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
from leasecron.models.shards import due_at, group_by_shard, shard_key, shard_lease_name, shard_of
from leasecron.models.specs import ScheduledJob
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


@dataclass(eq=False)
class _Entry:
    job: ScheduledJob
    after: datetime
    not_before: datetime
    next: NextTick | None = None
    shard: int = 0
    running: tuple[asyncio.Task[None], RunControl] | None = None
    stopped: bool = field(default=False)


class ShardTicks:
    """The sharded once-per-tick jobs of one running Scheduler."""

    def __init__(self, services: Services, *, shards: int) -> None:
        self._services = services
        self.shards = shards
        self._entries: dict[str, _Entry] = {}
        self._by_shard: dict[int, set[str]] = {}
        self._foreign: dict[str, ScheduledJob] = {}
        self._locks: dict[int, ShardLock] = {}
        self._changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._instants: set[asyncio.Task[None]] = set()
        self._floors = ShardFloors(services, shards=shards)
        self._claiming: dict[int, asyncio.Future[None]] = {}
        """Per shard: settled once this replica's claim of its latest instant is."""

    # --- the jobs ---------------------------------------------------------------------------

    def add(self, job: ScheduledJob, *, created: datetime) -> None:
        shard = shard_of(job.name, shards=self.shards)
        self._entries[job.name] = _Entry(job=job, after=created, not_before=created, shard=shard)
        self._by_shard.setdefault(shard, set()).add(job.name)
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
            self._by_shard.get(entry.shard, set()).discard(name)
            entry.stopped = True
            await self._stop_running(entry, reason)

    def note_foreign(self, job: ScheduledJob) -> None:
        """A sharded job of the group whose handler is not registered here: this replica does
        not run it, and steps back from claiming its shard's instants when it is due."""
        self._foreign[job.name] = job

    def forget_foreign(self, name: str) -> None:
        self._foreign.pop(name, None)

    def _handlers_due(self, shard: int, instant: datetime) -> set[str]:
        """Handlers of every job of `shard` due at `instant`, registered here or not."""
        handlers = {e.job.handler_name for e in self._due(shard, instant)}
        for job in self._foreign.values():
            schedule = job.spec.parsed_schedule
            if schedule is None or job.spec.suspend:
                continue
            if shard_of(job.name, shards=self.shards) == shard and due_at(schedule, instant):
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
        pairs = [(name, planned.tick) for name, planned in ticks.items()]
        for (shard, instant), names in group_by_shard(pairs, shards=self.shards).items():
            catch_up = any(ticks[n].catch_up for n in names)
            task = asyncio.get_running_loop().create_task(
                self._instant(shard, instant, catch_up=catch_up),
                name=f"leasecron shard {shard} {instant.isoformat()}",
            )
            self._instants.add(task)
            task.add_done_callback(self._instants.discard)

    # --- one instant of one shard -------------------------------------------------------------

    def _lock(self, shard: int) -> ShardLock:
        lock = self._locks.get(shard)
        if lock is None:
            services = self._services
            lock = ShardLock(
                services.kube,
                services.lease_cache,
                namespace=services.namespace,
                name=shard_lease_name(services.group, shard, shards=self.shards),
                identity=services.identity,
                clock=services.clock,
                labels=shard_labels(services.group, shard),
                config=shard_config(services.tuning.shard_lease_s),
                floor=functools.partial(self._floors.floor, shard),
            )
            self._locks[shard] = lock
        return lock

    def _due(self, shard: int, instant: datetime) -> list[_Entry]:
        """Every job of `shard` with a tick at `instant` that this replica knows."""
        entries = [self._entries[n] for n in sorted(self._by_shard.get(shard, ()))]
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

    async def _instant(self, shard: int, instant: datetime, *, catch_up: bool) -> None:
        """Claim `instant` of `shard` after this replica's claim of the shard's previous
        instant is settled (a later instant claimed first would make the earlier one taken),
        then run every job of the shard due at it."""
        loop = asyncio.get_running_loop()
        previous = self._claiming.get(shard)
        settled: asyncio.Future[None] = loop.create_future()
        self._claiming[shard] = settled
        try:
            if previous is not None:
                await previous
            lock = self._lock(shard)
            grant = await self._claim(lock, shard, instant, catch_up=catch_up)
            if grant is None:
                return
            async with lock.use(grant):
                settled.set_result(None)
                due = self._due(shard, instant)
                _log.debug(
                    "shard instant claimed",
                    shard=shard,
                    tick=instant.isoformat(),
                    token=grant.token,
                    jobs=len(due),
                )
                await asyncio.gather(
                    *(self._run_job(entry, grant, instant, catch_up=catch_up) for entry in due)
                )
        finally:
            if not settled.done():
                settled.set_result(None)
            if self._claiming.get(shard) is settled:
                del self._claiming[shard]

    async def _claim(
        self, lock: ShardLock, shard: int, instant: datetime, *, catch_up: bool
    ) -> Grant | None:
        """One claim after the rendezvous stagger among the live members that registered the
        handlers of every job due (none while we hold the shard), again after a live grant
        ends or while the store cannot be reached, until the startingDeadline. None without
        a claim, also when another replica is better placed (it has handlers we lack)."""
        services = self._services
        needed = self._handlers_due(shard, instant)
        able = services.membership.members_with(needed, own=services.registry.names())
        if able and services.identity not in able:
            # Another live replica registered every handler due: it claims the instant,
            # so that no job of the shard goes without a run.
            return None
        key = shard_key(services.group, shard, instant)
        rank = rendezvous_rank(key, services.identity, able or services.membership.members())
        deadline = self._deadline(self._due(shard, instant))
        claim_deadline = None if catch_up else deadline
        stagger = 0.0 if lock.holding() else rank * services.tuning.claim_step
        result = await lock.try_claim(instant, stagger=stagger, starting_deadline=claim_deadline)
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
                instant, stagger=stagger, starting_deadline=claim_deadline
            )
        return result if isinstance(result, Grant) else None

    async def _run_job(
        self, entry: _Entry, grant: Grant, instant: datetime, *, catch_up: bool
    ) -> None:
        services, job = self._services, entry.job
        schedule = job.spec.parsed_schedule
        assert schedule is not None
        plan = plan_claimed(
            schedule,
            claimed=instant,
            previous=grant.replaced_tick,
            previous_ran=not grant.replaced_unrun,
            not_before=entry.not_before,
            catch_up=job.spec.catch_up.policy,
            max_ticks=job.spec.catch_up.max_ticks,
        )
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
