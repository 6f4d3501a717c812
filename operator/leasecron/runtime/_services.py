"""`Services`: what every job worker of one running Scheduler shares, and the helpers that
build a run's context, run its handler and count its skips, and `run_tick`: the one path by
which every dispatch (every-replica, once-per-tick under a grant or the group leader's term,
unguarded) runs a tick: its JobRun, its context, its handler, its outcome. The steps of that
path are `_TickRun`'s, one per call, holding the tick's record between them.

Owns nothing with a lifetime of its own: the scheduler core creates these objects, starts
and stops them; workers only use them. It does not decide which replica runs a tick.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from leasecron._logs import get_logger
from leasecron._metrics import SKIPS
from leasecron.coordination import Fence, LostEvent
from leasecron.coordination.floors import token_floor
from leasecron.coordination.resourcelocks import PartyOptions
from leasecron.kube.clients import Kube
from leasecron.models.clocks import Clock
from leasecron.models.names import format_tick
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.models.specs import Attempt, Bucket, JobRun, Outcome, ScheduledJob, Trigger
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerEnd, HandlerRun, RunControl, StopReason
from leasecron.runtime._membership import Membership
from leasecron.runtime._observe import RunObserver
from leasecron.runtime._pacing import StartPacer
from leasecron.runtime._planning import TickPlan
from leasecron.runtime._records import Recorder, outcome_of
from leasecron.runtime._registry import HandlerRegistry, RegisteredHandler
from leasecron.runtime._retries import Attempts
from leasecron.runtime._tick_records import (
    MISSED_ENDED,
    MISSED_LATE,
    RecordMode,
    TickRecord,
    record_missed,
)
from leasecron.runtime._timeouts import timeout_of

_log = get_logger("leasecron.runtime")
_JOB_LOG = get_logger("leasecron.job")
"""The runs' logger, bound per run (`Services.context`): a lazy proxy made once, which follows
structlog's configuration as any logger of the library does (made again at each bind unless
`cache_logger_on_first_use`)."""


@dataclass(frozen=True, kw_only=True)
class Tuning:
    """Timings of the runtime itself (not of any job); the defaults suit production."""

    claim_step: float = 0.1
    """Seconds each rank waits after the one before it to claim a tick (rank x step)."""
    claim_step_per_job: float = 0.000025
    """Added to `claim_step` per job due in the group at the instant (0.25 s more at 10,000
    jobs): the claim writes of a large instant take longer to land at the API server, and a
    rank that writes before the placed replica's claim has landed races it (the runs of the
    instant then pile up on whoever wins most races)."""
    owner_step: float = 0.5
    """Seconds each rank waits before its first attempt to own a single-owner job."""
    member_duration_s: int = 15
    member_renew_every: float = 5.0
    unguarded_after: float = 5.0
    """onStoreUnavailable: RunLocally runs a tick unguarded only after every claim attempt
    for it failed to reach the store for this long (at most half its startingDeadline)."""
    claim_retry: float = 0.25
    """First pause between claim attempts while the store cannot be reached (doubling)."""
    unguarded_record_timeout: float = 2.0
    """Seconds an unguarded run waits for its JobRun create before running without it."""
    shard_lease_s: int = 10
    """leaseDurationSeconds of a shard grant: renewed every third of it while runs under the
    shard go; a replica that dies or stops loses its shards after this long."""
    tune_gc: bool = True
    """While the Scheduler runs, raise the garbage collector's thresholds (unless the
    application set its own) and freeze the heap out of its full collections as the jobs
    held grow (`runtime._collector`): with the defaults its pauses grow with the jobs held
    and the runs going on, on the event loop. Process-wide; False leaves the collector
    alone."""
    store_time: bool = True
    """Read wall time as the API server's clock (estimated from its responses' Date
    headers, `kube.servertime`) instead of this host's: a replica whose clock runs ahead
    neither claims a tick before it has come nor takes the tick before it. Applies to a
    `SystemClock` (the default); any other clock passed in is used as it is."""


@dataclass(frozen=True, kw_only=True)
class Taken:
    """The record of a run taken up as a request (RecordMode.TAKEN), and what bounds its
    retries."""

    run: JobRun
    earlier: tuple[Attempt, ...] = ()
    """Attempts another holder made before this one took the run over: numbering goes on."""
    until: datetime | None = None
    """A retry starts before this instead of before the schedule's next tick (a requested
    run is outside the schedule); None: the next tick bounds it, as for a scheduled tick."""


@dataclass(frozen=True, kw_only=True)
class Services:
    """The shared pieces of one running Scheduler."""

    namespace: str
    group: str
    identity: str
    clock: Clock
    kube: Kube
    registry: HandlerRegistry
    executor: ThreadPoolExecutor
    recorder: Recorder
    membership: Membership
    lease_cache: Any
    """The watch-fed cache of the namespace's Leases (an Informer) for locks and electors."""
    grace_period: float
    tuning: Tuning
    shards: int = DEFAULT_SHARDS
    """The shard count proposed for the group (docs/design.md §5.8); its record's count wins."""
    observer: RunObserver = field(default_factory=RunObserver)
    """The run hooks and spans: told of every handler call, outcome and skip."""
    pacer: StartPacer = field(default_factory=StartPacer)
    """Lets the starts of a claimed plan through a slice of loop time at a time, so that the
    grant renewals behind a claim of thousands of runs keep their deadlines."""
    _skip_counters: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    """Per job and reason: its skips counter (a replica skips most jobs' ticks: N-1 of N)."""

    def __post_init__(self) -> None:
        # Records written off the start path wait while starts queue at the pacer.
        self.recorder.deferred.starts_idle = self.pacer.idle

    def context(
        self,
        job: ScheduledJob,
        *,
        tick: datetime,
        token: int | None,
        held: Any = None,
        unguarded: bool = False,
        attempt: int = 1,
        trigger: Trigger | None = None,
        requested_by: str | None = None,
    ) -> JobContext:
        """The JobContext of one run of `job`, its logger bound to job, tick, holder, token
        (and the trigger of a requested run, the attempt of a handed-over one)."""
        logger = _JOB_LOG.bind(
            job=job.name,
            namespace=self.namespace,
            tick=format_tick(tick),
            holder=self.identity,
            token=token,
        )
        if trigger not in (None, Trigger.SCHEDULE):
            logger = logger.bind(trigger=str(trigger), requested_by=requested_by)
        if attempt > 1:
            logger = logger.bind(attempt=attempt)
        return JobContext(
            job=job.name,
            namespace=self.namespace,
            tick=tick,
            holder=self.identity,
            bucket=job.spec.bucket,
            token=token,
            handler=job.handler_name,
            unguarded=unguarded,
            attempt=attempt,
            trigger=trigger or Trigger.SCHEDULE,
            requested_by=requested_by,
            lost=LostEvent(),
            logger=logger,
            held=held,
        )

    async def run_handler(
        self,
        job: ScheduledJob,
        ctx: JobContext,
        control: RunControl,
        *,
        observe_lag: bool = True,
        start_by: datetime | None = None,
    ) -> HandlerEnd | None:
        """Run the job's handler once under `control`, not called at all past `start_by`,
        stopped at its spec.timeout; None when it is not registered."""
        handler = self.registry.get(job.handler_name)
        if handler is None:
            self.skip(job, SkipReason.NO_HANDLER, tick=ctx.tick)
            return None
        call = self.handler_call(handler, ctx, start_by=start_by)
        timeout = timeout_of(job, grace_period=self.grace_period)
        return await control.run(call, observe_lag=observe_lag, limit=timeout)

    def handler_call(
        self, handler: RegisteredHandler, ctx: JobContext, *, start_by: datetime | None = None
    ) -> HandlerRun:
        """One call of `handler` for `ctx`, observed (its span, its `started` hook)."""
        return HandlerRun(
            handler,
            ctx,
            executor=self.executor,
            clock=self.clock,
            start_by=start_by,
            on_call=self.observer.calling(ctx),
        )

    def report(
        self,
        job: ScheduledJob,
        ctx: JobContext,
        end: HandlerEnd,
        control: RunControl,
        *,
        notify: bool = True,
    ) -> tuple[Outcome, str]:
        """Count and log the outcome of a finished run; returns (outcome, message). With
        `notify=False` the caller tells the listeners itself once the outcome is recorded."""
        term = ctx.bucket is Bucket.SINGLE_OWNER
        outcome, message = outcome_of(
            end, reason=control.reason, unguarded=ctx.unguarded, term=term, note=control.note
        )
        self.recorder.count(job, ctx, outcome, message, notify=notify)
        self.observer.ended(ctx, end, outcome, message)
        fields = {"outcome": outcome.value, "duration": round(end.duration, 3)}
        if end.error is not None:
            ctx.logger.error("handler failed", message=message, exc_info=end.error, **fields)
        elif message:
            ctx.logger.warning("handler stopped", message=message, **fields)
        else:
            ctx.logger.info("handler finished", **fields)
        return outcome, message

    async def run_tick(
        self,
        job: ScheduledJob,
        tick: datetime,
        control: RunControl,
        *,
        fence: Fence | None,
        record: RecordMode,
        observe_lag: bool = True,
        start_by: datetime | None = None,
        taken: Taken | None = None,
    ) -> Outcome | None:
        """Run one tick of `job`: record it per `record` (TAKEN: the record is `taken`), run
        the handler under `control` with `fence`'s token (None: no token), retried per
        spec.retry, report and finish the record. The outcome, or None when the tick was not
        run (another run of it is on record, no record could be made for a guarded run, or it
        could not start by `start_by`: then it is recorded Missed). The steps are `_TickRun`'s."""
        unguarded = record is RecordMode.UNGUARDED
        tick_record = TickRecord(
            recorder=self.recorder,
            job=job,
            tick=tick,
            holder=self.identity,
            token=fence.token if fence is not None else None,
            mode=record,
            run=taken.run if taken is not None else None,
            timeout=self.tuning.unguarded_record_timeout if unguarded else None,
        )
        tick_run = _TickRun(
            services=self,
            job=job,
            tick=tick,
            control=control,
            fence=fence,
            record=tick_record,
            observe_lag=observe_lag,
            start_by=start_by,
            taken=taken,
        )
        return await tick_run.go()

    def token_floor(self, *jobs: str) -> Callable[[], Awaitable[int]]:
        """Reads the highest fencing token on record for `jobs`, so that a Lease created for
        them again never hands out a token already used (docs/design.md §5.12)."""

        async def floor() -> int:
            floors = [await token_floor(self.kube, namespace=self.namespace, job=j) for j in jobs]
            return max(floors, default=0)

        return floor

    def party(
        self,
        *,
        name: str,
        labels: Mapping[str, str],
        floor: Callable[[], Awaitable[int]],
        owner_reference: Mapping[str, Any] | None = None,
    ) -> PartyOptions:
        """Who this replica is on the Lease `name` (for a TickLock or an Elector)."""
        return PartyOptions(
            namespace=self.namespace,
            name=name,
            identity=self.identity,
            clock=self.clock,
            labels=labels,
            owner_reference=owner_reference,
            floor=floor,
        )

    async def run_plan(
        self,
        job: ScheduledJob,
        plan: TickPlan,
        control: RunControl,
        *,
        fence: Fence,
        record: Callable[[datetime], RecordMode],
        observe_lag: Callable[[datetime], bool],
        delay: Callable[[datetime], float] = lambda _: 0.0,
        start_by: Callable[[datetime], datetime | None] = lambda _: None,
    ) -> None:
        """Run a claimed plan under `fence`: queue the records of its missed ticks, then run
        each planned tick in order through `run_tick`. Once the fence has ended (or a stop was
        asked), the ticks not started are recorded `Missed`: the Lease records them as
        claimed, so nobody else will run them. Each start waits its turn at the pacer (a
        claim of thousands of runs must not hold the event loop for seconds at a time)."""
        await self.record_missed(job, plan.missed, fence.token, reason=MISSED_LATE)
        for index, tick in enumerate(plan.run):
            await self.pacer.turn()
            if control.stopping or not fence.held:
                unrun = plan.run[index:]
                await self.record_missed(job, unrun, fence.token, reason=MISSED_ENDED)
                return
            wait = delay(tick)
            if wait > 0:
                await asyncio.sleep(wait)
            await self.run_tick(
                job,
                tick,
                control,
                fence=fence,
                record=record(tick),
                observe_lag=observe_lag(tick),
                start_by=start_by(tick),
            )

    async def record_missed(
        self, job: ScheduledJob, ticks: Sequence[datetime], token: int | None, *, reason: str
    ) -> None:
        """Queue a `Missed` JobRun for each of `ticks`, claimed by this replica under `token`
        (`record_missed`)."""
        record_missed(self.recorder, job, ticks, holder=self.identity, token=token, reason=reason)

    def stop_when_lost(self, lost: LostEvent, control: RunControl) -> Callable[[], None]:
        """Stop the run's handler (reason LOST) once `lost` is set, from whichever thread sets
        it; returns the function that unlinks them."""
        loop = asyncio.get_running_loop()
        stop = functools.partial(control.request_stop, StopReason.LOST, grace=self.grace_period)

        def lost_now() -> None:
            loop.call_soon_threadsafe(stop)

        return lost.on_set(lost_now)

    def skip(self, job: ScheduledJob, reason: str, *, tick: datetime | None = None) -> None:
        """A tick this replica does not run: normal (N-1 per tick); debug log and count."""
        self.skip_all([job], reason, tick=tick)

    def skip_all(
        self, jobs: Sequence[ScheduledJob], reason: str, *, tick: datetime | None = None
    ) -> None:
        """`tick` of each of `jobs` is not run here, for one `reason` (a shard instant another
        replica claimed: every job of it): counted per job, logged once at debug."""
        counters, observer = self._skip_counters, self.observer
        for job in jobs:
            counter = counters.get((job.name, reason))
            if counter is None:
                counter = counters[(job.name, reason)] = SKIPS.labels(
                    self.namespace, job.name, reason
                )
            counter.inc()
            observer.skipped(
                job, namespace=self.namespace, holder=self.identity, reason=reason, tick=tick
            )
        if jobs:
            _log.debug(
                "tick skipped",
                job=jobs[0].name,
                jobs=len(jobs),
                namespace=self.namespace,
                tick=format_tick(tick) if tick is not None else None,
                holder=self.identity,
                reason=reason,
            )


@dataclass(kw_only=True)
class _TickRun:
    """One tick on the run path, `Services.run_tick`, its steps in order: too late to start,
    open the record, run the handler once, close the record of a handler not called, or retry
    per spec.retry and close the record with the outcome. One per call; nothing outlives it."""

    services: Services
    job: ScheduledJob
    tick: datetime
    control: RunControl
    fence: Fence | None
    record: TickRecord
    observe_lag: bool
    start_by: datetime | None
    taken: Taken | None

    async def go(self) -> Outcome | None:
        """The steps, in order; the outcome, or None when the tick was not run."""
        services, job, tick, record = self.services, self.job, self.tick, self.record
        # 1. Too late to start: not run; under a fence, recorded Missed.
        if self.start_by is not None and services.clock.now() > self.start_by:
            services.skip(job, SkipReason.DEADLINE, tick=tick)
            if self.fence is not None:
                record.missed(MISSED_LATE)
            return None
        # 2. The record, as asked; a tick that needs one and has none is not run.
        not_run = await record.open()
        if not_run is not None:
            services.skip(job, not_run, tick=tick)
            return None
        # 3. The handler, once.
        ctx = self._context()
        attempt = self.control.attempt()
        end = await services.run_handler(
            job, ctx, attempt, observe_lag=self.observe_lag, start_by=self.start_by
        )
        if end is None:  # not registered (`run_handler` counted it)
            await record.close(Outcome.FAILED, "no handler")
            return None
        if end.late:
            services.skip(job, SkipReason.DEADLINE, tick=tick)
            await record.close(Outcome.MISSED, MISSED_LATE)
            return None
        # 4. Retries per spec.retry, then the record of the outcome.
        started = services.clock.now() - timedelta(seconds=end.duration)
        done = await self._attempts().run(ctx, end, attempt)
        await record.close(done.outcome, done.message, attempts=done.attempts, started=started)
        return done.outcome

    def _context(self) -> JobContext:
        """The run's context: a taken-up run's trigger and attempt number go on."""
        fence, taken, run = self.fence, self.taken, self.record.run
        spec = run.spec if taken is not None and run is not None else None
        unguarded = self.record.mode is RecordMode.UNGUARDED
        ctx = self.services.context(
            self.job,
            tick=self.tick,
            token=self.record.token,
            held=(lambda: fence.held) if fence is not None else None,
            unguarded=unguarded,
            attempt=len(taken.earlier) + 1 if taken is not None else 1,
            trigger=spec.trigger if spec is not None else None,
            requested_by=spec.requested_by if spec is not None else None,
        )
        if unguarded:
            ctx.logger.warning(
                "store unavailable: running unguarded (onStoreUnavailable: RunLocally)"
            )
        return ctx

    def _attempts(self) -> Attempts:
        """The retries of this run, their progress and marks written to its record."""
        taken = self.taken
        return Attempts(
            self.services,
            self.job,
            self.control,
            fence=self.fence,
            progress=self.record.progress,
            mark=self.record.mark,
            earlier=taken.earlier if taken is not None else (),
            until=taken.until if taken is not None else None,
        )
