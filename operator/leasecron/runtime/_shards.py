"""`ShardTicks`: the claim engine of every once-per-tick job of this replica's group
(docs/design.md, "The claim engine"), with one timer for all of them and one conditional
write per shard and instant. Every-replica jobs share its timer and run path without a claim
(no Lease, no record): their ticks go from the timer straight to `ShardRuns.run_here`, under
the same jitter, startingDeadline and concurrencyPolicy rules.

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

`ShardTicks` is the facade the Scheduler calls (`_jobs`, `_requests`, `_oneshot`); the work is
its collaborators', each owning one concern and given the `Services` and only the
collaborators it uses (the job table takes the group's shard count as a value, read by its
caller from the group record):

- `_shard_timer.ShardTimer`: the one timer (every-replica jobs' too) and the placement of
  each instant (1);
- `_shard_claims.ShardClaims`: claiming a shard instant, retried, adopted, or a run
  request's (2, 5, 6);
- `_shard_runs.ShardRuns`: what a grant runs and how long it is held (3, 4), and the runs
  without a grant (every-replica ticks, the unguarded runs of 6);
- `_shard_jobs.ShardJobs`: the jobs, run here (claimed or every-replica) or foreign, and the
  shard Lease of each;
- `_shard_group.ShardGroup`: the group record; `_shard_leases`: a `ShardLock` per shard
  Lease, and the retired ones another replica still holds.

It does not run single-owner jobs (`_owner`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any

from leasecron.coordination import Grant, LeaseView, Skipped
from leasecron.coordination.groups import GroupRecord
from leasecron.models.groups import GroupState
from leasecron.models.shards import ShardRef
from leasecron.models.specs import ScheduledJob
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._services import Services
from leasecron.runtime._shard_claims import ShardClaims
from leasecron.runtime._shard_group import ShardGroup
from leasecron.runtime._shard_jobs import ShardJobs
from leasecron.runtime._shard_leases import RetiredShards, ShardLocks
from leasecron.runtime._shard_runs import _FRESH_MARGIN as _FRESH_MARGIN
from leasecron.runtime._shard_runs import ShardRuns
from leasecron.runtime._shard_runs import _unclaimed_before as _unclaimed_before
from leasecron.runtime._shard_timer import ShardTimer
from leasecron.runtime._tick_records import MISSED_LATE


class ShardTicks:
    """The scheduled jobs (once-per-tick, every-replica) of one running Scheduler."""

    def __init__(self, services: Services, *, shards: int) -> None:
        self._services = services
        self.shards = shards
        """The count this replica was configured with; the group record's count wins."""
        self._group = ShardGroup(services, shards=shards)
        self._jobs = ShardJobs(services)
        self._locks = ShardLocks(services, self._group, on_orphan=self._adopt)
        retired = RetiredShards(services, self._locks)
        self._runs = ShardRuns(services, self._jobs, self._group, retired)
        self._claims = ShardClaims(services, self._jobs, self._group, self._locks, self._runs)
        self._timer = ShardTimer(
            services, self._jobs, self._group, self._claims, self._runs, spawn=self._spawn
        )
        self._instants: set[asyncio.Task[None]] = set()

    # --- the group record -------------------------------------------------------------------

    @property
    def view(self) -> LeaseView:
        """The process's watch-fed view of the namespace's Leases."""
        return self._group.view

    @property
    def group(self) -> GroupRecord:
        return self._group.record

    def state(self) -> GroupState:
        """The group record as this replica follows it (its configured count until read)."""
        return self._group.state()

    def start(self) -> None:
        """Read (or create) the group record now, in the background, so that the record
        exists as soon as a replica of the group runs; claims wait for it anyway."""
        self._spawn(self._group.read())

    def ref_of(self, name: str) -> ShardRef:
        """The shard Lease that claims the ticks of the job named `name`."""
        return self._jobs.ref_of(name, self.state())

    # --- the jobs ---------------------------------------------------------------------------

    def add(self, job: ScheduledJob, *, created: datetime) -> None:
        self._jobs.add(job, created=created)
        self._timer.wake()

    def update(self, job: ScheduledJob) -> None:
        if self._jobs.update(job):
            self._timer.wake()

    async def remove(self, name: str, reason: StopReason) -> None:
        await self._jobs.remove(name, reason)

    async def run_now(self, job: ScheduledJob, tick: datetime) -> bool:
        """Claim and run `tick` of `job` now, whatever its startingDeadline (an explicit
        request: `Scheduler.run_once`); False when this replica did not get the claim."""
        return await self._claims.run_now(job, tick)

    async def claim_request(
        self,
        job: ScheduledJob,
        *,
        wanted: Callable[[], bool],
        give_up: datetime,
        body: Callable[[Grant], Awaitable[None]],
    ) -> Grant | Skipped:
        """A run request's claim (`_requests`, `ShardClaims.request`): a new instant, now, of
        `job`'s shard, tried again while `wanted()` and until `give_up`; `body(grant)` runs
        under the grant beside the shard's jobs it overtook."""
        return await self._claims.request(job, wanted=wanted, give_up=give_up, body=body)

    def track(self, name: str, run: tuple[asyncio.Task[None], RunControl]) -> None:
        """A run of job `name` made outside its ticks here (a retry handed over from a
        vanished holder): the job's later ticks see it as they see their own earlier runs
        (concurrencyPolicy Forbid waits for it, Replace stops it)."""
        self._jobs.track(name, run)

    def note_token(self, name: str, token: int) -> None:
        """The highest token on record for job `name` (its status.lastRun): a job keeps one
        token sequence for life, whichever Lease claimed its earlier ticks."""
        self._claims.note_token(name, token)

    def note_foreign(self, job: ScheduledJob) -> None:
        """A once-per-tick job of the group whose handler is not registered here: this replica
        does not run it, and steps back from claiming its shard's instants when it is due."""
        self._jobs.note_foreign(job)

    def forget_foreign(self, name: str) -> None:
        self._jobs.forget_foreign(name)

    async def close(self, reason: StopReason) -> None:
        await self._timer.close()
        await self._jobs.close(reason)
        for instant in list(self._instants):
            instant.cancel()
        await asyncio.gather(*self._instants, return_exceptions=True)
        await self._locks.close()
        self._group.close()

    # --- the engine's tasks -----------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None], name: str | None = None) -> None:
        """Run `work` in a task that `close` cancels: an instant's claim, the group's read."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._instants.add(task)
        task.add_done_callback(self._instants.discard)

    async def _adopt(self, ref: ShardRef, grant: Grant) -> None:
        """The lock of `ref` found an orphan grant of ours (`ShardClaims.adopt`)."""
        await self._claims.adopt(ref, grant)


__all__ = ["MISSED_LATE", "ShardTicks"]
