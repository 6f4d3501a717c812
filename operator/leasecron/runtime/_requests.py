"""`RequestPickup`: run requests (`leasecron run`, `leasecron backfill`) taken up exactly once,
under the same claim and fencing as a tick (docs/design.md, "Run requests").

1. An informer watches the request JobRuns of the namespace (label `leasecron.dev/trigger`).
   Every replica that runs the request's job (a once-per-tick job of its group whose handler
   it registered) looks at each Pending one.
2. The replicas rank themselves by rendezvous on the request's name over the live members
   that registered the handler; the first goes at once, the others only if the request is
   still Pending after their stagger (watch-fed, no requests).
3. The claim: the job's shard Lease claims a NEW instant, now (`ShardTicks.claim_request`,
   the engine's one claim write), whose token is above every token of the shard before it.
4. The pickup: one resourceVersion-conditional merge patch of the request (holder, token,
   start, Running). A 409 means another replica took it: nothing runs and the instant is
   released with the shard. A reply that was lost is read back before it counts either way.
5. The handler runs with `ctx.tick` = the request's tick and the grant's token; its outcome
   is written to the request as for any run.

A retry handed over by the operator (a run whose holder vanished during its back-off, made
Pending again and labelled `leasecron.dev/trigger=Retry`: `models.handover`) is picked up the
same way, by its bound instead of the startingDeadline from its creation; the pickup also
writes its next attempt, Running, and the run's attempts continue from the earlier ones.

A request nobody picks up within the job's startingDeadline is finished `Missed` by the
operator, not here: when no replica is there to pick it up, no replica is there to expire it.
A requested run goes through the one run-a-tick path (`Services.run_tick`, RecordMode.TAKEN),
so it gets the job's spec.timeout and spec.retry as a scheduled tick does, its attempts in the
request's status; its retries start within the claim's atMostFor from its start (its own
deadline: it has no next tick). Its handler sees `ctx.trigger` and `ctx.requested_by`. It does
not wait for a scheduled run of the same job, nor do they wait for it (concurrencyPolicy is
the schedule's).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination import Grant
from leasecron.kube._caches import ObjectCache
from leasecron.kube.errors import Conflict, KubeError, NotFound, OutcomeUnknown, Unavailable
from leasecron.kube.jobruns import JobRunStore
from leasecron.kube.watches import Informer, WatchEvent, backoff_delays
from leasecron.models.decisions import rendezvous_rank
from leasecron.models.handover import Handover, next_retry
from leasecron.models.requests import REQUEST_SELECTOR, Request, pickup_patch, read_request
from leasecron.models.specs import Bucket, JobRun, JobRunSpec, ScheduledJob, SpecError
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._overlap import stop_run
from leasecron.runtime._services import Services, Taken
from leasecron.runtime._shardfences import RunFence, run_fence
from leasecron.runtime._shards import ShardTicks
from leasecron.runtime._tick_records import RecordMode

_log = get_logger("leasecron.runtime.requests")
PICKUP_STEP = 0.5
"""Seconds each rank waits after the one before it to pick up a request."""
_READ_BACKS = 5

JobLookup = Callable[[str], ScheduledJob | None]
"""The once-per-tick job of that name this replica runs (None: not one of ours)."""


def _created(obj: dict[str, Any]) -> datetime | None:
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def retry_bound(job: ScheduledJob, request: Request) -> datetime | None:
    """When a handed-over retry must have started by (None: none is owed)."""
    handover = owed_retry(job, request)
    return handover.until if handover is not None else None


def owed_retry(job: ScheduledJob, request: Request) -> Handover | None:
    """The retry a handed-over run is owed: its attempt, its back-off and its bound."""
    spec = job.spec
    return next_retry(
        attempts=request.attempts,
        retry=spec.retry,
        tick=request.tick,
        schedule=spec.parsed_schedule,
        policy=spec.concurrency_policy,
        starting_deadline=spec.starting_deadline,
    )


def job_lookup(jobs: ObjectCache, services: Services) -> JobLookup:
    """The JobLookup over the watch-fed ScheduledJobs: a valid once-per-tick job of this
    replica's group whose handler is registered here (read from the cache itself, so a
    request is not missed while the job table converges)."""

    def lookup(name: str) -> ScheduledJob | None:
        obj = jobs.get(services.namespace, name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        try:
            job = ScheduledJob.from_resource(obj)
        except SpecError:
            return None
        ours = job.spec.group == services.group and job.handler_name in services.registry
        return job if ours and job.spec.bucket is Bucket.ONCE_PER_TICK else None

    return lookup


class RequestPickup:
    """The run requests of one running Scheduler's namespace."""

    def __init__(self, services: Services, *, ticks: ShardTicks, jobs: JobLookup) -> None:
        self._services = services
        self._ticks = ticks
        self._jobs = jobs
        self._store = JobRunStore(services.kube)
        self.informer = Informer(
            services.kube,
            path=self._store.collection_path(namespace=services.namespace),
            label_selector=REQUEST_SELECTOR,
            clock=services.clock,
        )
        self._unsubscribe = self.informer.subscribe(self._on_event)
        self._pickups: dict[str, asyncio.Task[None]] = {}
        self._running: dict[str, tuple[asyncio.Task[None], RunControl]] = {}
        self._starter: asyncio.Task[None] | None = None
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start watching in the background (retried while the API server cannot be read)."""
        self._starter = asyncio.get_running_loop().create_task(
            self._start(), name="leasecron run requests"
        )

    async def _start(self) -> None:
        delays = backoff_delays(first=0.5, cap=10.0)
        while True:
            try:
                await self.informer.start()
            except KubeError as e:
                delay = next(delays)
                _log.warning("run requests not watched yet", error=repr(e), retry_in=delay)
                await asyncio.sleep(delay)
                continue
            self.resync()
            return

    async def close(self, reason: StopReason) -> None:
        """Stop picking up; requested runs going finish or are stopped as ticks are."""
        self._closed = True
        self._unsubscribe()
        if self._starter is not None and not self._starter.done():
            self._starter.cancel()
        grace = self._services.grace_period
        await asyncio.gather(
            *(stop_run(r, reason=reason, grace=grace) for r in self._running.values())
        )
        for task in self._pickups.values():
            task.cancel()
        await asyncio.gather(*self._pickups.values(), return_exceptions=True)
        await self.informer.stop()

    # --- which requests ----------------------------------------------------------------

    def resync(self) -> None:
        """Look at every Pending request again (a job or handler of ours may be new)."""
        for obj in self.informer.items():
            self._consider(obj)

    def _on_event(self, event: WatchEvent) -> None:
        if event.type in ("ADDED", "MODIFIED"):
            self._consider(event.obj)

    def _consider(self, obj: dict[str, Any]) -> None:
        request = read_request(obj)
        if self._closed or request is None or not request.pending:
            return
        task = self._pickups.get(request.name)
        if task is not None and not task.done():
            return
        if self._jobs(request.job) is None:
            return
        task = asyncio.get_running_loop().create_task(
            self._pickup(request.name), name=f"leasecron request {request.name}"
        )
        self._pickups[request.name] = task
        task.add_done_callback(functools.partial(self._forget, request.name))

    def _forget(self, name: str, task: asyncio.Task[None]) -> None:
        if self._pickups.get(name) is task:
            del self._pickups[name]

    def settled(self, name: str) -> bool:
        """Whether this replica saw request `name` finished and is done with it (for tests
        and probes: no pickup of it goes here any more)."""
        obj = self.informer.get(self._services.namespace, name)
        request = read_request(obj) if obj is not None else None
        done = request is not None and request.outcome.finished
        return done and name not in self._pickups and name not in self._running

    def _current(self, name: str) -> Request | None:
        obj = self.informer.get(self._services.namespace, name)
        return read_request(obj, created=_created(obj)) if obj is not None else None

    def _still_pending(self, name: str) -> bool:
        request = self._current(name)
        return request is not None and request.pending

    # --- one request --------------------------------------------------------------------

    async def _pickup(self, name: str) -> None:
        services = self._services
        request = self._current(name)
        job = self._jobs(request.job) if request is not None else None
        if request is None or job is None or not request.pending:
            return
        able = services.membership.members_with(
            [job.handler_name], own=services.registry.name_set()
        )
        key = f"request/{services.namespace}/{name}"
        stagger = rendezvous_rank(key, services.identity, able or [services.identity]) * PICKUP_STEP
        if stagger > 0 and await self.informer.wait_for(
            lambda: not self._still_pending(name), timeout=stagger
        ):
            return
        made = request.created or services.clock.now()
        give_up = max(made + job.spec.starting_deadline, services.clock.now())
        if request.retry:
            owed = owed_retry(job, request)
            if owed is None or owed.until <= services.clock.now():
                return
            give_up = owed.until
            # Its back-off first: the attempt starts no sooner than on the vanished holder.
            wait = (owed.at - services.clock.now()).total_seconds()
            if wait > 0 and await self.informer.wait_for(
                lambda: not self._still_pending(name), timeout=wait
            ):
                return
        result = await self._ticks.claim_request(
            job,
            wanted=functools.partial(self._still_pending, name),
            give_up=give_up,
            body=functools.partial(self._take_and_run, job, name),
        )
        if not isinstance(result, Grant):
            _log.debug("run request not claimed here", request=name, reason=result.reason)

    async def _take_and_run(self, job: ScheduledJob, name: str, grant: Grant) -> None:
        """Under `grant`: take the request (one conditional patch), then run it."""
        request = self._current(name)
        if request is None or not request.pending or self._closed:
            return
        start = self._services.clock.now()
        if not await self._take(request, grant, start=start):
            _log.debug("run request taken by another replica", request=name, token=grant.token)
            return
        control = RunControl()
        task = asyncio.get_running_loop().create_task(
            self._run(job, request, grant, control, start=start), name=f"leasecron run {name}"
        )
        self._running[name] = (task, control)
        if request.retry:  # a run of the schedule: its overlap rules see it
            self._ticks.track(job.name, (task, control))
        try:
            await asyncio.gather(task, return_exceptions=True)
        finally:
            self._running.pop(name, None)

    async def _take(self, request: Request, grant: Grant, *, start: datetime) -> bool:
        """The conditional pickup patch; True when the request is ours (read back after a
        lost reply or a conflict: ours, another's, or still Pending at a newer version)."""
        services = self._services
        identity, token = services.identity, grant.token
        for _ in range(_READ_BACKS):
            patch = pickup_patch(request, holder=identity, token=token, start=start)
            try:
                await self._store.patch_status(
                    namespace=services.namespace, name=request.name, patch=patch
                )
                return True
            except NotFound:
                return False
            except (Conflict, OutcomeUnknown, TimeoutError) as e:
                _log.debug("run request pickup to read back", request=request.name, error=repr(e))
            except KubeError as e:
                _log.warning("run request not picked up", request=request.name, error=repr(e))
                return False
            obj = await self._read_back(request.name)
            if obj is None:
                return False
            spec = obj.get("spec") or {}
            if spec.get("holder") == identity and spec.get("fencingToken") == token:
                return True
            again = read_request(obj)
            if again is None or not again.pending:
                return False
            request = again
        return False

    async def _read_back(self, name: str) -> dict[str, Any] | None:
        """The request as stored, read until the store answers: a pickup whose outcome is
        not known may have made it Running under this replica, and only a read tells
        whether it is this replica's to run (never left Running unrun). None when it is
        gone."""
        delays = backoff_delays(first=0.2, cap=2.0)
        while True:
            try:
                return await self._store.get(namespace=self._services.namespace, name=name)
            except (Unavailable, OutcomeUnknown, TimeoutError) as e:
                _log.warning("run request not read back; retrying", request=name, error=repr(e))
                await asyncio.sleep(next(delays))
            except KubeError as e:
                _log.error("run request cannot be read back", request=name, error=repr(e))
                return None

    async def _run(
        self,
        job: ScheduledJob,
        request: Request,
        grant: Grant,
        control: RunControl,
        *,
        start: datetime,
    ) -> None:
        services = self._services
        spec = JobRunSpec(
            job=job.name,
            tick=request.tick,
            holder=services.identity,
            fencing_token=grant.token,
            start=start,
            trigger=request.trigger,
            requested_by=request.requested_by or None,
        )
        record = JobRun(name=request.name, namespace=services.namespace, spec=spec)

        def link(fence: RunFence) -> Callable[[], None]:
            return services.stop_when_lost(fence.lost, control)

        _log.info(
            "running a requested run",
            job=job.name,
            request=request.name,
            token=grant.token,
            trigger=request.trigger.value,
            by=request.requested_by,
        )
        # Its retries are bounded by the request's own deadline, its claim's atMostFor from
        # its start (keepAlive or not): a request is outside the schedule, so the next tick
        # says nothing about it (a backfilled tick's next tick is long past).
        taken = Taken(run=record, until=start + job.spec.lock.at_most_for)
        if request.retry:
            # A retry handed over: its attempts go on from the vanished holder's, under this
            # claim's (new, higher) token, and start before the handover's bound.
            until = retry_bound(job, request)
            taken = Taken(run=record, earlier=request.attempts, until=until)
        with run_fence(grant, job, clock=services.clock, link=link) as fence:
            await services.run_tick(
                job,
                request.tick,
                control,
                fence=fence,
                record=RecordMode.TAKEN,
                observe_lag=False,
                taken=taken,
            )
