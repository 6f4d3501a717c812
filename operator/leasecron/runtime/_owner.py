"""`OwnerWorker`: a single-owner job on this replica (docs/design.md §5.10).

An Elector on the job's Lease; while it leads, one ownership term: a JobRun named
`term_jobrun_name(job, token)` (outcome Running), and the handler run as a long-lived loop.
The term ends when leadership is lost (the handler is cancelled: task.cancel() for async
handlers, `ctx.lost` for sync ones; outcome LostLock), when the worker stops (shutdown, job
deleted or suspended: the handler is stopped and waited for, bounded by the grace period, the
term recorded, then the Lease released so a standby takes over at once), or when the handler
returns by itself (its outcome is recorded, the Lease released, and the replica contends again
after retryPeriod). Replicas that are not preferred for the job (rendezvous rank among the
live members, the Lease's last holder left out) wait rank x step before each attempt, so
different jobs spread over the replicas. It does not rebalance jobs that are already owned.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination import Elector, Term
from leasecron.kube.errors import KubeError
from leasecron.models.configs import ElectionConfig
from leasecron.models.decisions import rendezvous_rank
from leasecron.models.names import LABEL_JOB, job_lease_name
from leasecron.models.specs import JobRun, ScheduledJob, job_label_value
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerEnd, HandlerRun, RunControl, StopReason
from leasecron.runtime._services import Services

_log = get_logger("leasecron.runtime.owner")


def owner_reference(job: ScheduledJob) -> dict[str, Any] | None:
    """The ownerReference that makes a Lease part of the job (None without uid)."""
    if not job.uid:
        return None
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "name": job.name,
        "uid": job.uid,
    }


def election_config(job: ScheduledJob) -> ElectionConfig:
    election = job.spec.election
    return ElectionConfig(
        lease_duration=election.lease_duration,
        renew_deadline=election.renew_deadline,
        retry_period=election.retry_period,
    )


class _TermRun:
    """The handler of one term and what is needed to record it."""

    def __init__(self, term: Term, ctx: JobContext, call: HandlerRun | None) -> None:
        self.term = term
        self.ctx = ctx
        self.call = call
        self.control = RunControl()
        self.record: JobRun | None = None
        self.recorded = False


class OwnerWorker:
    """Contends for one single-owner job and runs its handler while it owns it."""

    def __init__(self, services: Services, job: ScheduledJob) -> None:
        self._services = services
        self._job = job
        self._elector: Elector | None = None
        self._task: asyncio.Task[None] | None = None
        self._resign = asyncio.Event()
        self._reason: StopReason | None = None
        self._current: _TermRun | None = None

    @property
    def job(self) -> ScheduledJob:
        return self._job

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"leasecron owner {self._job.name}"
        )

    def update(self, job: ScheduledJob) -> None:
        """A new spec that keeps the election as it is (handler, timings unchanged)."""
        self._job = job

    @property
    def leading(self) -> bool:
        return self._elector is not None and self._elector.is_leader

    async def stop(self, reason: StopReason) -> None:
        """End the term (handler stopped and waited for within the grace period, recorded),
        release the Lease, stop contending."""
        self._reason = reason
        task, self._task = self._task, None
        elector = self._elector
        if elector is not None:
            await elector.stop(release=True)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        retry = self._job.spec.election.retry_period.total_seconds()
        while True:
            elector = self._elector = self._make_elector()
            elector.start()
            await self._resign.wait()
            self._resign.clear()
            await elector.stop(release=True)
            await asyncio.sleep(retry)

    def _make_elector(self) -> Elector:
        services, job = self._services, self._job
        party = services.party(
            name=job_lease_name(job.name),
            labels={LABEL_JOB: job_label_value(job.name)},
            owner_reference=owner_reference(job),
            floor=services.token_floor(job.name),
        )
        return Elector(
            services.kube,
            services.lease_cache,
            config=election_config(job),
            on_started_leading=self._on_started,
            on_stopped_leading=self._on_stopped,
            stagger=self._stagger,
            **party,
        )

    def _stagger(self) -> float:
        services = self._services
        members = services.membership.members()
        last = self._elector.leader if self._elector is not None else ""
        if last and last != services.identity:
            members = [m for m in members if m != last]  # it released or died: not preferred
        rank = rendezvous_rank(self._job.name, services.identity, members)
        return rank * services.tuning.owner_step

    async def _on_started(self, term: Term) -> None:
        services, job = self._services, self._job
        handler = services.registry.get(job.handler_name)
        start = services.clock.now()
        ctx = services.context(job, tick=start, token=term.token, held=lambda: term.held)
        call = services.handler_call(handler, ctx) if handler is not None else None
        run = self._current = _TermRun(term, ctx, call)
        try:
            run.record = await services.recorder.start_term(
                job, token=term.token, holder=services.identity
            )
        except KubeError as e:
            _log.warning("term JobRun not created", job=job.name, token=term.token, error=repr(e))
        if call is None:
            services.skip(job, SkipReason.NO_HANDLER, tick=start)
            return
        ctx.logger.info("ownership term started")
        end = await run.control.run(call, observe_lag=False)
        await self._record(run, end)
        self._resign.set()  # the handler returned by itself: end the term, contend again

    async def _on_stopped(self, term: Term) -> None:
        """The term ended (its task is already cancelled, so the handler was told): wait for
        the handler within the grace period and record the term."""
        run = self._current
        if run is None or run.term is not term or run.recorded or run.call is None:
            return
        if not run.call.started:
            return  # ended before the handler started: nothing ran
        grace = self._services.grace_period
        run.control.request_stop(self._reason or StopReason.LOST, grace=grace)
        end = await run.call.wait(grace)
        if end is None:
            end = await run.call.stop(grace=1.0)
        await self._record(run, end)

    async def _record(self, run: _TermRun, end: HandlerEnd) -> None:
        if run.recorded:
            return
        run.recorded = True
        services = self._services
        outcome, message = services.report(self._job, run.ctx, end, run.control, notify=False)
        if run.record is not None:
            with contextlib.suppress(KubeError):
                await services.recorder.finish(run.record, outcome=outcome, message=message)
        # Listeners hear of the term only once its outcome is written: `run_once` stops the
        # worker as soon as it hears, which must not cut the final status patch short.
        services.recorder.notify(self._job, run.ctx, outcome, message)
