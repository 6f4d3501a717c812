"""The one async implementation of a guard's claim and finish (every front end uses it).

`claim()` numbered as it runs:

1. Start (once per loop) the watch-fed cache of the namespace's guard, shard and group
   Leases; a store that cannot be reached is a skip (`store_unavailable`: fail closed).
2. For a `job=` guard, read the ScheduledJob from its cache (validated like the Scheduler
   reads it; a single-owner or every-replica job, or an invalid one, is a GuardConfigError
   naming the field); its lock, startingDeadline and suspend apply, and the member Lease of
   the guard's identity in the job's group lists the job's handler (`GuardMembers`).
3. The lock: a plain guard's on its own Lease (a tick at or before the latest one this
   process saw claimed there is `taken`: `GuardMarks`, kept when the Lease is deleted); a
   `job=` guard's on its job's own shard Lease, under the group's rules (the job moved
   there first when the group record does not list it: `GroupRecord.move_job`), the Lease
   a Scheduler that registered the job claims on too. Then `TickLock.try_claim` after a
   random part of the stagger: the tick's high-water mark, conditional writes only, lost
   replies read back, orphans adopted or freed, the Lease created above the highest token
   seen on it (a `job=` guard's: above the group's ceiling; every claim above the token of
   the job's last run its status shows), nobody past the start-by time (`start_by`: a
   plain guard's caller's fire time + its starting_deadline, a `job=` guard's tick + the
   job's startingDeadline). A skip is returned as a value.
4. Hold the grant: renewed every third of the short Lease while the body runs (the lock's
   `KeepAlive`), and the run's fence (`RunFence`: the grant, for at most atMostFor unless
   kept alive; at atMostFor the grant is released and the body told through `lost`). For a
   `job=` guard open the tick's record before the body starts, as a Scheduler's run path
   does (`TickRecord`, GUARDED, bounded): a skip (`exists`, `record_failed`) releases the
   grant.
5. The front end checks the start-by time where the body would start (`late`): a body is
   never started after it; the claim is ended by `missed` instead (its JobRun finished
   Missed, its grant released, skip `deadline`).

`finish()` stops the keep-alive and the atMostFor watch, counts the run in RUNS, ends its
span and tells the run hooks (`_observe`), closes the record with the outcome (Succeeded,
Failed with the error, LostLock when the grant was lost or expired first), then releases the
grant (atLeastFor honoured).
Every skip is counted once in SKIPS (here or by the TickLock) and told to the hooks there.
Anything unexpected is logged and becomes a skip with reason `error` in `claim()`, or a log
line in `finish()`: an internal failure never reaches the caller's scheduler; the body's own
exception does (the front ends re-raise it).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leasecron._logs import get_logger
from leasecron._metrics import RUN_DURATION, RUNS, SKIPS, START_LAG
from leasecron.coordination import Grant, LostLockError, Skipped, TickLock
from leasecron.coordination.floors import highest_token
from leasecron.coordination.locks import SKIP_CONFLICT
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError
from leasecron.kube.watches import Informer
from leasecron.models.clocks import Clock
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import SKIP_DEADLINE, SKIP_TAKEN
from leasecron.models.groups import GroupRecordError
from leasecron.models.names import format_tick
from leasecron.models.specs import Bucket, Outcome, ScheduledJob, SpecError
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._guard_runs import (
    REASON_ERROR,
    REASON_NO_JOB,
    REASON_SUSPENDED,
    GuardRun,
)
from leasecron.runtime._guard_runtime import GuardRuntime
from leasecron.runtime._guard_settings import (
    GuardConfigError,
    GuardSettings,
    lease_config,
    start_by,
    tick_for,
    whole_second,
)
from leasecron.runtime._hooks import RunHooks
from leasecron.runtime._observe import observe_end, observe_skip
from leasecron.runtime._records import describe_error
from leasecron.runtime._shardfences import RunFence
from leasecron.runtime._tick_records import MISSED_LATE, RecordMode, TickRecord

_log = get_logger("leasecron.runtime.guards")
BUCKET = Bucket.ONCE_PER_TICK.value
"""The bucket label of a guard's runs in RUNS: the same per-tick promise."""
RECORD_TIMEOUT = 5.0
"""Seconds the Running JobRun's create may take before the tick is not run."""
SKIP_UNAVAILABLE = SkipReason.STORE_UNAVAILABLE
SKIP_GROUP_UNREADABLE = SkipReason.GROUP_RECORD_UNREADABLE


def _job_lock(job: ScheduledJob) -> LockConfig:
    lock = job.spec.lock
    return LockConfig(
        at_most_for=lock.at_most_for, at_least_for=lock.at_least_for, keep_alive=lock.keep_alive
    )


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One guard on one runtime: `settings`, the client it was given (None: the runtime's
    own), the clock it uses and the guard's run hooks."""

    settings: GuardSettings
    runtime: GuardRuntime
    given_kube: Kube | None
    clock: Clock
    hooks: RunHooks

    @property
    def kube(self) -> Kube:
        return self.runtime.kube(self.given_kube)

    def _skip(self, tick: datetime, reason: str, *, holder: str = "", **log: object) -> GuardRun:
        s = self.settings
        SKIPS.labels(job_namespace=s.namespace, scheduled_job=s.name, reason=reason).inc()
        fields = {"guard": s.name, "tick": format_tick(tick), "reason": reason, "holder": holder}
        _log.debug("tick skipped", **fields, **log)
        return self._skipped(tick, reason, holder="")

    def _skipped(self, tick: datetime, reason: str, *, holder: str) -> GuardRun:
        """The skip of `tick` (counted in SKIPS already), told to the hooks."""
        s = self.settings
        run = GuardRun(
            guard=s.name, namespace=s.namespace, tick=tick, reason=reason, holder=holder, job=s.job
        )
        observe_skip(self.hooks, run.event(skipped_by=s.identity))
        return run

    async def claim(self, *, fired: datetime | None, now: datetime, snap: bool) -> GuardRun:
        """Claim the tick of a call made at `now` whose fire time the caller gave as `fired`,
        snapped onto the schedule with `snap` (see the module docstring); GuardConfigError for
        a bad `job=` or an unknown tick."""
        self.runtime.observed.add(self.hooks)
        try:
            return await self._claim(fired=fired, now=now, snap=snap)
        except GuardConfigError:
            raise
        except Exception as e:
            tick = fired or now
            _log.exception("guard claim failed", guard=self.settings.name, tick=format_tick(tick))
            return self._skip(whole_second(tick, what="tick"), REASON_ERROR, error=repr(e))

    def _tick(
        self, fired: datetime | None, now: datetime, job: ScheduledJob | None, snap: bool
    ) -> datetime:
        schedule = job.spec.parsed_schedule if job is not None else self.settings.schedule
        return tick_for(name=self.settings.name, now=now, given=fired, schedule=schedule, snap=snap)

    async def _claim(self, *, fired: datetime | None, now: datetime, snap: bool) -> GuardRun:
        s = self.settings
        if s.job is None:
            tick = self._tick(fired, now, None, snap)  # an unknown tick fails before any I/O
        # 1. The guard Leases' cache (and the job's) of this loop.
        try:
            kube = self.kube
            cache = await self.runtime.lease_cache(kube, s.namespace, self.clock)
            job, above = await self._job() if s.job is not None else (None, 0)
        except (KubeError, TimeoutError) as e:
            if s.job is not None:  # the job's schedule is not known: the fire time as it is
                tick = whole_second(fired or now, what="tick")
            return self._skip(tick, SKIP_UNAVAILABLE, error=repr(e))
        # 2. What the ScheduledJob says.
        if s.job is not None:
            if job is None:
                _log.warning("ScheduledJob not found; tick not run", guard=s.name, job=s.job)
                return self._skip(whole_second(fired or now, what="tick"), REASON_NO_JOB)
            self.runtime.advertise(
                kube, settings=s, group=job.spec.group, handler=job.handler_name, clock=self.clock
            )
            tick = self._tick(fired, now, job, snap)
            if job.spec.suspend:
                return self._skip(tick, REASON_SUSPENDED)
        config = s.lock if job is None else _job_lock(job)
        deadline = s.starting_deadline if job is None else job.spec.starting_deadline
        assert config is not None and deadline is not None
        begin_by = start_by(tick=tick, fired=fired, deadline=deadline, job=job is not None)
        # 3. The claim: one conditional write at most, on the guard's short Lease.
        lock = await self._lock(kube, cache, job, tick, lease_config(config, s.lease_duration))
        if isinstance(lock, GuardRun):
            return lock
        # The replica that claimed the previous tick claims this one at once; the others wait
        # a random part of the stagger, so they write only when it does not (it died, or its
        # scheduler did not fire it).
        stagger = 0.0 if lock.claimed_last() else random.uniform(0.0, s.stagger.total_seconds())
        result = await _try_claim(lock, tick, stagger=stagger, begin_by=begin_by, above=above)
        if isinstance(result, Skipped):  # counted in SKIPS by the lock
            return self._skipped(tick, result.reason, holder=result.holder)
        # 4. Hold it (renewed, bounded by atMostFor); record the run before the body starts.
        run = GuardRun(guard=s.name, namespace=s.namespace, tick=tick, grant=result, job=s.job)
        run.start_by = begin_by
        self._hold(run, lock, config)
        self.runtime.active.add(run)
        if job is not None:
            run.record = self._record(job, tick, result)
            not_run = await run.record.open()
            if not_run is not None:
                await self._let_go(run)
                return self._skip(tick, not_run)
        run.started = self.clock.monotonic()
        START_LAG.labels(s.namespace, s.name, BUCKET).observe(
            max(0.0, (self.clock.now() - tick).total_seconds())
        )
        return run

    async def _lock(
        self,
        kube: Kube,
        cache: Informer,
        job: ScheduledJob | None,
        tick: datetime,
        config: LockConfig,
    ) -> TickLock | GuardRun:
        """The lock a claim of `tick` goes through, or a skip: a plain guard's on its own
        Lease unless this runtime saw the tick claimed there (its mark, kept across the
        Lease's deletion); a `job=` guard's on its job's own shard Lease."""
        s, runtime = self.settings, self.runtime
        if job is None:
            marks = runtime.marks(kube, s)
            if marks.claimed(tick):
                return self._skip(tick, SKIP_TAKEN, marked=format_tick(marks.tick or tick))
            return runtime.tick_lock(kube, cache, settings=s, config=config, clock=self.clock)
        try:
            return await runtime.job_lock(
                kube,
                cache,
                settings=s,
                job=job.name,
                group=job.spec.group,
                config=config,
                clock=self.clock,
            )
        except GroupRecordError as e:
            return self._skip(tick, SKIP_GROUP_UNREADABLE, error=str(e))
        except (KubeError, TimeoutError) as e:
            return self._skip(tick, SKIP_UNAVAILABLE, error=repr(e))

    def _hold(self, run: GuardRun, lock: TickLock, config: LockConfig) -> None:
        """Renew the grant every third of the short Lease while the body runs, and give the
        run its fence: the grant, for at most atMostFor from now unless kept alive (then the
        grant is released, as a Lease lasting atMostFor would have expired)."""
        grant = run.grant
        assert grant is not None
        run.keep_alive = lock.keep_alive(grant)
        run.keep_alive.start()
        bound = None if config.keep_alive else config.at_most_for
        fence = RunFence(grant, at_most_for=bound, clock=self.clock)
        run.fence = fence
        run.watchdog = asyncio.get_running_loop().create_task(
            self._bounded(run, fence), name=f"guard {run.guard} atMostFor"
        )

    async def _bounded(self, run: GuardRun, fence: RunFence) -> None:
        await fence.watch()
        grant = run.grant
        if grant is None or not grant.held:
            return  # lost or released: nothing to end
        _log.warning(
            "guarded body still running at its atMostFor; its grant is released",
            guard=self.settings.name,
            tick=format_tick(run.tick),
            token=grant.token,
        )
        if run.keep_alive is not None:
            await run.keep_alive.stop()
        await grant.release()

    async def _stop_holding(self, run: GuardRun) -> None:
        """Stop renewing the grant and watching the run's atMostFor."""
        watchdog, run.watchdog = run.watchdog, None
        if watchdog is not None:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
        if run.keep_alive is not None:
            await run.keep_alive.stop()

    async def _let_go(self, run: GuardRun) -> None:
        """A held run that does not start: stop holding it and release its grant."""
        await self._stop_holding(run)
        self.runtime.active.discard(run)
        if run.grant is not None:
            await run.grant.release()

    def late(self, run: GuardRun) -> bool:
        """Whether a held run's body would start after its start-by time now."""
        return run.ran and run.start_by is not None and self.clock.now() > run.start_by

    async def missed(self, run: GuardRun) -> GuardRun:
        """A held run whose body would start after its start-by time: not started, its JobRun
        (for `job=`) finished Missed, its grant released; the skip (`deadline`)."""
        try:
            if run.record is not None:
                await run.record.close(Outcome.MISSED, MISSED_LATE)
            await self._let_go(run)
        except Exception:
            _log.exception("ending a late claim failed", guard=self.settings.name, tick=run.tick)
        start_by = format_tick(run.start_by) if run.start_by is not None else ""
        return self._skip(run.tick, SKIP_DEADLINE, start_by=start_by)

    async def _job(self) -> tuple[ScheduledJob | None, int]:
        """The guard's ScheduledJob from the cache (None: not there) and the highest token
        its status shows for its last run (a claim's token goes above it)."""
        s = self.settings
        assert s.job is not None
        cache = await self.runtime.job_cache(self.kube, s.namespace, self.clock)
        obj = cache.get(s.namespace, s.job)
        if obj is None:
            return None, 0
        return _guarded_job(s.job, obj), highest_token(job=s.job, scheduled_job=obj)

    def _record(self, job: ScheduledJob, tick: datetime, grant: Grant) -> TickRecord:
        """The record of a `job=` guard's run of `tick` under `grant`, created before the
        body starts (bounded: `RECORD_TIMEOUT`)."""
        recorder = self.runtime.recorder(self.kube, self.settings.namespace, self.clock)
        return TickRecord(
            recorder=recorder,
            job=job,
            tick=tick,
            holder=grant.holder,
            token=grant.token,
            mode=RecordMode.GUARDED,
            timeout=RECORD_TIMEOUT,
        )

    async def finish(self, run: GuardRun, *, error: BaseException | None) -> None:
        """End a held run: outcome counted and recorded, grant released. Never raises."""
        try:
            await self._finish(run, error=error)
        except Exception:
            _log.exception("guard finish failed", guard=self.settings.name, tick=run.tick)
            run.span.end(outcome=Outcome.FAILED, message="the guard's finish failed")
        finally:
            self.runtime.active.discard(run)

    async def _finish(self, run: GuardRun, *, error: BaseException | None) -> None:
        grant = run.grant
        if grant is None:
            return
        await self._stop_holding(run)
        s = self.settings
        duration = max(0.0, self.clock.monotonic() - run.started)
        outcome, message = _outcome(run, error)
        RUNS.labels(s.namespace, s.name, BUCKET, outcome.value).inc()
        RUN_DURATION.labels(s.namespace, s.name, BUCKET).observe(duration)
        fields = {"guard": s.name, "tick": format_tick(run.tick), "token": grant.token}
        if outcome is Outcome.SUCCEEDED:
            _log.info("guarded body finished", holder=grant.holder, duration=duration, **fields)
        else:
            _log.warning("guarded body ended", outcome=outcome.value, message=message, **fields)
        observe_end(
            self.hooks,
            run.event(),
            run.span,
            outcome=outcome,
            message=message,
            error=error,
            duration=duration,
        )
        if run.record is not None:
            await run.record.close(outcome, message)
        if isinstance(run.fence, RunFence):
            run.fence.close()
        await grant.release()


async def _try_claim(
    lock: TickLock, tick: datetime, *, stagger: float, begin_by: datetime, above: int
) -> Grant | Skipped:
    """The claim of `tick` after `stagger`; after a `conflict` (another write landed first)
    decided again at once on the Lease as the store has it now, as the engine's claims are
    (`_shard_claims._claim_until`): taken, a live grant, or claimable still (the write it met
    was a release or a renewal, not a claim of this tick)."""
    result = await lock.try_claim(
        tick, stagger=stagger, starting_deadline=begin_by - tick, above=above
    )
    conflict = isinstance(result, Skipped) and result.reason == SKIP_CONFLICT
    if conflict and await lock.lease.refresh():
        result = await lock.try_claim(tick, starting_deadline=begin_by - tick, above=above)
    return result


def _guarded_job(name: str, obj: dict[str, Any]) -> ScheduledJob:
    """The ScheduledJob a `job=` guard runs; GuardConfigError naming the field when it is
    not valid or not once-per-tick."""
    try:
        job = ScheduledJob.from_resource(obj)
    except SpecError as e:
        raise GuardConfigError(f"job={name!r}: the ScheduledJob is not valid: {e}") from e
    if job.spec.bucket is not Bucket.ONCE_PER_TICK:
        raise GuardConfigError(
            f"job={name!r}: spec.bucket ({job.spec.bucket.value!r}) must be once-per-tick: "
            "a guard runs one body per tick (every-replica jobs need no lock; single-owner "
            "jobs are run by the Scheduler's election)"
        )
    return job


def _outcome(run: GuardRun, error: BaseException | None) -> tuple[Outcome, str]:
    """The outcome of a body that ran under `run`, and its message."""
    if not run.held:
        fence = run.fence
        reason = fence.lost_reason if fence is not None else ""
        detail = f" ({describe_error(error)})" if error is not None else ""
        return Outcome.LOST_LOCK, f"the grant was lost while the body ran: {reason}{detail}"
    if error is not None and not isinstance(error, LostLockError):
        return Outcome.FAILED, describe_error(error)
    if error is not None:
        return Outcome.LOST_LOCK, describe_error(error)
    return Outcome.SUCCEEDED, ""
