"""The one async implementation of a guard's claim and finish (every front end uses it).

`claim()` numbered as it runs:

1. Start (once per loop) the watch-fed cache of the namespace's guard Leases; a store that
   cannot be reached is a skip (`store_unavailable`: fail closed).
2. For a `job=` guard, read the ScheduledJob from its cache (validated like the Scheduler
   reads it; a single-owner or every-replica job, or an invalid one, is a GuardConfigError
   naming the field); its lock, startingDeadline and suspend apply, and the member Lease of
   the guard's identity in the job's group lists the job's handler (`GuardMembers`).
3. `TickLock.try_claim` on the guard's Lease after a random part of the stagger: the tick's
   high-water mark, conditional writes only, lost replies read back, orphans adopted or freed,
   a `job=` guard's Lease created above the job's token floor (and every claim above the
   token of the job's last run its status shows). A skip is returned as a value.
4. Keep the grant alive while the body runs (`keep_alive`), and for a `job=` guard create the
   Running JobRun of the tick before the body starts (awaited, bounded): AlreadyExists means
   another replica has the tick (skip `exists`), a create that fails releases the grant (skip
   `record_failed`; a create whose reply was lost is recorded Missed, taking over our own
   record if it landed).

`finish()` stops the keep-alive, counts the run in RUNS, ends its span and tells the run hooks
(`_guard_observe`), writes the JobRun's outcome (Succeeded, Failed with the error, LostLock
when the grant was lost or expired first), then releases the grant (atLeastFor honoured).
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

from leasecron._logs import get_logger
from leasecron._metrics import RUN_DURATION, RUNS, SKIPS, START_LAG
from leasecron.coordination import Grant, LostLockError, Skipped
from leasecron.coordination.floors import highest_token
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, KubeError, OutcomeUnknown
from leasecron.models.clocks import Clock
from leasecron.models.configs import LockConfig
from leasecron.models.names import format_tick
from leasecron.models.specs import Bucket, JobRun, Outcome, ScheduledJob, SpecError
from leasecron.runtime import _guard_observe
from leasecron.runtime._guard_runs import (
    REASON_ERROR,
    REASON_NO_JOB,
    REASON_RECORD_FAILED,
    REASON_SUSPENDED,
    GuardRun,
)
from leasecron.runtime._guard_runtime import GuardRuntime
from leasecron.runtime._guard_settings import (
    GuardConfigError,
    GuardSettings,
    tick_for,
    whole_second,
)
from leasecron.runtime._hooks import RunHooks
from leasecron.runtime._records import Recorder, describe_error

_log = get_logger("leasecron.runtime.guards")
BUCKET = Bucket.ONCE_PER_TICK.value
"""The bucket label of a guard's runs in RUNS: the same per-tick promise."""
RECORD_TIMEOUT = 5.0
"""Seconds the Running JobRun's create may take before the tick is not run."""
SKIP_UNAVAILABLE = "store_unavailable"


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
        _log.debug(
            "tick skipped",
            guard=s.name,
            tick=format_tick(tick),
            reason=reason,
            holder=holder,
            **log,
        )
        run = GuardRun(guard=s.name, namespace=s.namespace, tick=tick, reason=reason, job=s.job)
        _guard_observe.skipped(self.hooks, run, identity=s.identity)
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
        assert config is not None
        # 3. The claim: one conditional write at most.
        lock = self.runtime.tick_lock(kube, cache, settings=s, config=config, clock=self.clock)
        stagger = random.uniform(0.0, s.stagger.total_seconds())
        result = await lock.try_claim(
            tick, stagger=stagger, starting_deadline=deadline, above=above
        )
        if isinstance(result, Skipped):  # counted in SKIPS by the lock
            skipped = GuardRun(
                guard=s.name,
                namespace=s.namespace,
                tick=tick,
                reason=result.reason,
                holder=result.holder,
                job=s.job,
            )
            _guard_observe.skipped(self.hooks, skipped, identity=s.identity)
            return skipped
        # 4. Keep it alive; record the run before the body starts.
        run = GuardRun(guard=s.name, namespace=s.namespace, tick=tick, grant=result, job=s.job)
        if job is not None:
            failed = await self._start_record(run, result, job)
            if failed is not None:
                return failed
        if config.keep_alive:
            run.keep_alive = lock.keep_alive(result)
            run.keep_alive.start()
        run.started = self.clock.monotonic()
        self.runtime.active.add(run)
        START_LAG.labels(s.namespace, s.name, BUCKET).observe(
            max(0.0, (self.clock.now() - tick).total_seconds())
        )
        return run

    async def _job(self) -> tuple[ScheduledJob | None, int]:
        """The guard's ScheduledJob from the cache (None: not there) and the highest token
        its status shows for its last run (a claim's token goes above it)."""
        s = self.settings
        assert s.job is not None
        cache = await self.runtime.job_cache(self.kube, s.namespace, self.clock)
        obj = cache.get(s.namespace, s.job)
        if obj is None:
            return None, 0
        try:
            job = ScheduledJob.from_resource(obj)
        except SpecError as e:
            raise GuardConfigError(f"job={s.job!r}: the ScheduledJob is not valid: {e}") from e
        if job.spec.bucket is not Bucket.ONCE_PER_TICK:
            raise GuardConfigError(
                f"job={s.job!r}: spec.bucket ({job.spec.bucket.value!r}) must be once-per-tick: "
                "a guard runs one body per tick (every-replica jobs need no lock; single-owner "
                "jobs are run by the Scheduler's election)"
            )
        return job, highest_token(job=s.job, scheduled_job=obj)

    async def _start_record(
        self, run: GuardRun, grant: Grant, job: ScheduledJob
    ) -> GuardRun | None:
        """Create the Running JobRun; None when it is written, else the skip (grant released)."""
        recorder = self._recorder()
        try:
            run.jobrun = await asyncio.wait_for(
                recorder.start_tick(job, tick=run.tick, holder=grant.holder, token=grant.token),
                RECORD_TIMEOUT,
            )
            run.job_uid = job.uid
            return None
        except AlreadyExists:
            await grant.release()
            return self._skip(run.tick, "exists")
        except (KubeError, TimeoutError) as e:
            if isinstance(e, OutcomeUnknown | TimeoutError):
                missed = JobRun.for_tick(
                    job=job.name,
                    tick=run.tick,
                    holder=grant.holder,
                    start=None,
                    fencing_token=grant.token,
                    namespace=self.settings.namespace,
                ).finish(
                    outcome=Outcome.MISSED,
                    end=self.clock.now(),
                    message="the run record could not be confirmed, so the body was not run",
                )
                recorder.record_later(missed, job_uid=job.uid)
            await grant.release()
            return self._skip(run.tick, REASON_RECORD_FAILED, error=repr(e))

    def _recorder(self) -> Recorder:
        return self.runtime.recorder(self.kube, self.settings.namespace, self.clock)

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
        if run.keep_alive is not None:
            await run.keep_alive.stop()
        s = self.settings
        duration = max(0.0, self.clock.monotonic() - run.started)
        if not grant.held:
            detail = f" ({describe_error(error)})" if error is not None else ""
            outcome = Outcome.LOST_LOCK
            message = f"the grant was lost while the body ran: {grant.lost_reason}{detail}"
        elif error is not None and not isinstance(error, LostLockError):
            outcome, message = Outcome.FAILED, describe_error(error)
        elif error is not None:
            outcome, message = Outcome.LOST_LOCK, describe_error(error)
        else:
            outcome, message = Outcome.SUCCEEDED, ""
        RUNS.labels(s.namespace, s.name, BUCKET, outcome.value).inc()
        RUN_DURATION.labels(s.namespace, s.name, BUCKET).observe(duration)
        fields = {"guard": s.name, "tick": format_tick(run.tick), "token": grant.token}
        if outcome is Outcome.SUCCEEDED:
            _log.info("guarded body finished", holder=grant.holder, duration=duration, **fields)
        else:
            _log.warning("guarded body ended", outcome=outcome.value, message=message, **fields)
        _guard_observe.ended(
            self.hooks, run, outcome=outcome, message=message, error=error, duration=duration
        )
        if run.jobrun is not None:
            try:
                await asyncio.wait_for(
                    self._recorder().finish(run.jobrun, outcome=outcome, message=message),
                    RECORD_TIMEOUT,
                )
            except TimeoutError:
                finished = run.jobrun.finish(outcome=outcome, end=self.clock.now(), message=message)
                self._recorder().record_later(finished, job_uid=run.job_uid)
        await grant.release()
