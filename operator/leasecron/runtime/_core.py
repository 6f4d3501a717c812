"""`Runtime`: the one async implementation behind every way of running a Scheduler.

Owns the lifetime of everything a running scheduler holds: the Kube client (when it made it),
the watch-fed caches (the namespace's ScheduledJobs and coordination Leases, the group's
member Leases), this replica's member Lease, the handler thread pool and the job workers
(the claim engine among them). Startup waits for the API server while it cannot be reached
(or its CRDs are not there yet) and fails on anything else. Shutdown, in order: no new
ticks, the member Lease deleted, every worker stopped concurrently (running handlers finish
or are stopped within the grace period, Leases released), the caches closed. It does not
install signal handlers or threads: `Scheduler` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from leasecron._logs import get_logger
from leasecron.coordination import lease_informer
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError, NotFound, Unavailable
from leasecron.kube.jobruns import JobRunStore, ScheduledJobStore
from leasecron.kube.leases import LeaseStore
from leasecron.kube.servertime import ServerTime
from leasecron.kube.watches import Informer, backoff_delays
from leasecron.models.clocks import Clock, OffsetClock, SystemClock
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.runtime._collector import GcTuner
from leasecron.runtime._hooks import RunHooks
from leasecron.runtime._invoke import StopReason
from leasecron.runtime._jobs import JobTable
from leasecron.runtime._membership import Membership
from leasecron.runtime._observe import RunObserver
from leasecron.runtime._records import Recorder
from leasecron.runtime._registry import HandlerRegistry
from leasecron.runtime._requests import RequestPickup, job_lookup
from leasecron.runtime._services import Services, Tuning
from leasecron.runtime._tracing import warm

_log = get_logger("leasecron.runtime")
Ready = Callable[[BaseException | None], None]
"""Called once: with None when the scheduler is running, or with the first startup error
(it keeps retrying after an Unavailable or NotFound one)."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What a Scheduler was built with."""

    group: str
    namespace: str
    identity: str
    clock: Clock
    grace_period: float
    max_threads: int
    tuning: Tuning
    shards: int = DEFAULT_SHARDS
    hooks: RunHooks = field(default_factory=RunHooks)


def store_clock(kube: Kube, settings: Settings) -> tuple[Clock, ServerTime | None]:
    """The clock a run reads: the API server's, estimated from the responses `kube` gets
    (`Tuning.store_time`, for a `SystemClock`), else the one the Scheduler was given."""
    clock = settings.clock
    if not settings.tuning.store_time or not isinstance(clock, SystemClock):
        return clock, None
    server_time = ServerTime(wall=lambda: clock.now().timestamp(), monotonic=clock.monotonic)
    server_time.install(kube)
    return OffsetClock(clock, server_time.offset), server_time


class Runtime:
    """One run of a scheduler: `serve()` until `stop` is set."""

    def __init__(self, settings: Settings, registry: HandlerRegistry, kube: Kube | None) -> None:
        self._settings = settings
        self._registry = registry
        self._given_kube = kube
        self.table: JobTable | None = None
        self.requests: RequestPickup | None = None
        self._background: asyncio.Task[None] | None = None

    async def serve(self, stop: asyncio.Event, ready: Ready) -> None:
        async with self.resources() as services:
            await self._serve(services, stop, ready)

    @contextlib.asynccontextmanager
    async def resources(self) -> AsyncIterator[Services]:
        """The Services of one run (caches and member Lease not started yet); the thread pool
        is shut down and a Kube made here is closed on exit."""
        kube = self._given_kube or Kube.from_config()
        executor = ThreadPoolExecutor(
            self._settings.max_threads, thread_name_prefix="leasecron-handler"
        )
        clock, server_time = store_clock(kube, self._settings)
        services = self._services(kube, executor, clock)
        try:
            yield services
        finally:
            # Records of unguarded runs wait for the store; give them a moment at shutdown.
            await services.recorder.flush(timeout=min(5.0, services.grace_period))
            await services.recorder.close()
            executor.shutdown(wait=False, cancel_futures=True)
            if server_time is not None:
                server_time.remove()
            if self._given_kube is None:
                await kube.close()

    def _services(self, kube: Kube, executor: ThreadPoolExecutor, clock: Clock) -> Services:
        settings = self._settings
        leases = LeaseStore(kube)
        lease_cache = lease_informer(kube, namespace=settings.namespace, clock=clock)
        membership = Membership(
            leases=leases,
            namespace=settings.namespace,
            group=settings.group,
            identity=settings.identity,
            handlers=self._registry.names,
            clock=clock,
            duration_s=settings.tuning.member_duration_s,
            renew_every=settings.tuning.member_renew_every,
        )
        recorder = Recorder(jobruns=JobRunStore(kube), namespace=settings.namespace, clock=clock)
        return Services(
            namespace=settings.namespace,
            group=settings.group,
            identity=settings.identity,
            clock=clock,
            kube=kube,
            registry=self._registry,
            executor=executor,
            recorder=recorder,
            membership=membership,
            lease_cache=lease_cache,
            grace_period=settings.grace_period,
            tuning=settings.tuning,
            shards=settings.shards,
            observer=RunObserver(settings.hooks),
        )

    async def _serve(self, services: Services, stop: asyncio.Event, ready: Ready) -> None:
        jobs_informer = ScheduledJobStore(services.kube).informer(
            namespace=services.namespace, clock=services.clock
        )
        table = self.table = JobTable(services)
        unsubscribe = jobs_informer.subscribe(table.on_event)
        pickup = self.requests = RequestPickup(
            services, ticks=table.shard_ticks, jobs=job_lookup(jobs_informer, services)
        )
        unsubscribe_pickup = jobs_informer.subscribe(lambda _: pickup.resync())
        collector = GcTuner(enabled=services.tuning.tune_gc)
        collector.start()
        services.pacer.on_busy = collector.hold  # no collection in a burst of claims and starts

        def grown(_: object) -> None:
            collector.jobs(table.known)

        unsubscribe_freezer = jobs_informer.subscribe(grown)
        loop = asyncio.get_running_loop()

        def registered() -> None:
            def apply() -> None:
                services.membership.advertise()
                table.resync(jobs_informer.items())
                pickup.resync()

            loop.call_soon_threadsafe(apply)

        forget = self._registry.on_change(registered)
        started = services.clock.now()
        try:
            if not await self._start(services, jobs_informer, stop, ready):
                return
            self._abandon_earlier(services, before=started)
            table.shard_ticks.start()
            pickup.start()
            await table.settled()
            ready(None)
            _log.info(
                "scheduler running",
                group=services.group,
                namespace=services.namespace,
                holder=services.identity,
                handlers=list(self._registry.names()),
            )
            await stop.wait()
        finally:
            forget()
            unsubscribe()
            unsubscribe_pickup()
            unsubscribe_freezer()
            services.pacer.on_busy = None
            collector.stop()
            if self._background is not None:
                self._background.cancel()
                await asyncio.gather(self._background, return_exceptions=True)
            await pickup.close(StopReason.STOPPING)
            await self._shutdown(services, table, jobs_informer)

    def _abandon_earlier(self, services: Services, *, before: datetime) -> None:
        """In the background: runs an earlier process of this identity left Running are
        finished Abandoned (retried while the JobRuns cannot be listed)."""

        async def abandon() -> None:
            delays = backoff_delays(first=0.5, cap=10.0)
            while True:
                try:
                    names = await services.recorder.abandon_earlier(
                        holder=services.identity, before=before
                    )
                except (KubeError, TimeoutError) as e:
                    _log.info("earlier runs of this identity not checked yet", error=repr(e))
                    await asyncio.sleep(next(delays))
                    continue
                if names:
                    _log.warning(
                        "runs of an earlier process of this identity finished Abandoned",
                        identity=services.identity,
                        jobruns=names,
                    )
                return

        self._background = asyncio.get_running_loop().create_task(
            abandon(), name="leasecron abandon earlier runs"
        )

    async def _start(
        self,
        services: Services,
        jobs_informer: Informer,
        stop: asyncio.Event,
        ready: Ready,
    ) -> bool:
        """Start the caches and the member Lease, retrying while the API server cannot be
        reached (`ready` hears of the first failure); False when a stop came first."""
        warm()  # the tracing import, before the first tick rather than on its start path
        delays = backoff_delays(first=0.5, cap=10.0)
        reported = False
        steps = (services.lease_cache.start, services.membership.start, jobs_informer.start)
        done = 0
        while done < len(steps):
            try:
                await steps[done]()
                done += 1
                continue
            except (Unavailable, NotFound) as e:
                if not reported:
                    ready(e)
                    reported = True
                delay = next(delays)
                _log.warning("API server not ready; retrying", error=repr(e), retry_in=delay)
            except KubeError as e:
                if not reported:
                    ready(e)
                raise
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay)
                return False
            except TimeoutError:
                continue
        return True

    async def _shutdown(self, services: Services, table: JobTable, jobs_informer: Informer) -> None:
        _log.info("scheduler stopping", group=services.group, holder=services.identity)
        await services.membership.stop()
        await table.close(StopReason.STOPPING)
        await jobs_informer.stop()
        await services.lease_cache.stop()
        _log.info("scheduler stopped", group=services.group, holder=services.identity)
