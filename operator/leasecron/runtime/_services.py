"""`Services`: what every job worker of one running Scheduler shares, and the helpers that
build a run's context, run its handler and count its skips.

Owns nothing with a lifetime of its own: the scheduler core creates these objects, starts
and stops them; workers only use them. It does not decide which replica runs a tick.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from leasecron._logs import get_logger
from leasecron._metrics import SKIPS
from leasecron.coordination import LostEvent
from leasecron.kube.clients import Kube
from leasecron.models.clocks import Clock
from leasecron.models.names import format_tick
from leasecron.models.specs import Bucket, Outcome, ScheduledJob
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerEnd, HandlerRun, RunControl, StopReason
from leasecron.runtime._membership import Membership
from leasecron.runtime._records import Recorder, outcome_of
from leasecron.runtime._registry import HandlerRegistry

_log = get_logger("leasecron.runtime")


@dataclass(frozen=True, kw_only=True)
class Tuning:
    """Timings of the runtime itself (not of any job); the defaults suit production."""

    claim_step: float = 0.1
    """Seconds each rank waits after the one before it to claim a tick (rank x step)."""
    owner_step: float = 0.5
    """Seconds each rank waits before its first attempt to own a single-owner job."""
    member_duration_s: int = 15
    member_renew_every: float = 5.0


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

    def context(
        self,
        job: ScheduledJob,
        *,
        tick: datetime,
        token: int | None,
        held: Any = None,
        unguarded: bool = False,
    ) -> JobContext:
        """The JobContext of one run of `job`, its logger bound to job, tick, holder, token."""
        logger = structlog.get_logger("leasecron.job").bind(
            job=job.name,
            namespace=self.namespace,
            tick=format_tick(tick),
            holder=self.identity,
            token=token,
        )
        return JobContext(
            job=job.name,
            namespace=self.namespace,
            tick=tick,
            holder=self.identity,
            bucket=job.spec.bucket,
            token=token,
            handler=job.handler_name,
            unguarded=unguarded,
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
    ) -> HandlerEnd | None:
        """Run the job's handler once under `control`; None when it is not registered."""
        handler = self.registry.get(job.handler_name)
        if handler is None:
            self.skip(job, "no_handler", tick=ctx.tick)
            return None
        call = HandlerRun(handler, ctx, executor=self.executor, clock=self.clock)
        return await control.run(call, observe_lag=observe_lag)

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
            end, reason=control.reason, unguarded=ctx.unguarded, term=term
        )
        self.recorder.count(job, ctx, outcome, message, notify=notify)
        fields = {"outcome": outcome.value, "duration": round(end.duration, 3)}
        if end.error is not None:
            ctx.logger.error("handler failed", message=message, exc_info=end.error, **fields)
        elif message:
            ctx.logger.warning("handler stopped", message=message, **fields)
        else:
            ctx.logger.info("handler finished", **fields)
        return outcome, message

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
        SKIPS.labels(self.namespace, job.name, reason).inc()
        _log.debug(
            "tick skipped",
            job=job.name,
            namespace=self.namespace,
            tick=format_tick(tick) if tick is not None else None,
            holder=self.identity,
            reason=reason,
        )
