"""JobRun records written by the runtime, and the outcome of a run.

Owns what a replica writes about its runs (docs/design.md §4): the JobRun of a tick (its create
doubles as the per-tick run record: AlreadyExists propagates, it means someone else has the
tick), the JobRun of a single-owner term, `Missed` records for skipped ticks, and the one
status patch that finishes a run. Failures to write a finish or a Missed record are logged,
never raised: a run that happened is not undone because its record could not be written.

A create whose reply was lost may have landed: it is read back before it counts as not
written. Records of runs that happened while the store was out of reach (unguarded runs) go
to the same queue as records written off the start path (`_deferred.DeferredRecords`), written
with retries once the store answers again (`record_later`, `RECORD_BACKLOG`); the queue lives
in memory, so a replica that dies with records pending loses them (the operator then records
those ticks as Missed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leasecron._logs import get_logger
from leasecron._metrics import RECORD_BACKLOG, RUNS
from leasecron.kube.errors import (
    AlreadyExists,
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    OutcomeUnknown,
    Unavailable,
)
from leasecron.kube.jobruns import JobRunStore
from leasecron.models.clocks import Clock
from leasecron.models.names import parse_tick
from leasecron.models.specs import Attempt, JobRun, Outcome, ScheduledJob
from leasecron.runtime._context import JobContext
from leasecron.runtime._deferred import DeferredRecords
from leasecron.runtime._invoke import HandlerEnd, StopReason

_log = get_logger("leasecron.runtime.records")
_CONFIRMS = 3
"""Tries to write (and read back) the mark of an attempt about to start."""


def describe_error(error: BaseException) -> str:
    """`Type: message` of an exception, as recorded in a Failed JobRun."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def outcome_of(
    end: HandlerEnd,
    *,
    reason: StopReason | None,
    unguarded: bool,
    term: bool,
    note: str = "",
) -> tuple[Outcome, str]:
    """The recorded outcome and message of a run that ended as `end`, interrupted for
    `reason` (None: not interrupted; `note` says more about it). A term that ends on
    handover or shutdown succeeded; a tick that had to be stopped did not; one that ran
    past its timeout timed out, whatever it did once told to stop."""
    if reason is StopReason.LOST:
        detail = f" ({describe_error(end.error)})" if end.error is not None else ""
        return Outcome.LOST_LOCK, f"the grant was lost while the handler ran{detail}"
    if reason is StopReason.TIMED_OUT and (end.interrupted or end.abandoned):
        return Outcome.TIMED_OUT, f"the run timed out {note or 'at its spec.timeout'}" + _after(end)
    if reason is StopReason.REPLACED and (end.interrupted or end.abandoned):
        return Outcome.FAILED, f"the handler was stopped: replaced {note}".rstrip() + _after(end)
    if end.error is not None:
        return Outcome.FAILED, describe_error(end.error)
    if end.abandoned:
        return Outcome.FAILED, "the handler did not stop within the grace period"
    if reason is not None and end.interrupted and not term:
        return Outcome.FAILED, f"the handler was stopped: {why_stopped(reason)}"
    return (Outcome.UNGUARDED if unguarded else Outcome.SUCCEEDED), ""


def _after(end: HandlerEnd) -> str:
    """What a handler did once told to stop, when it is worth saying."""
    if end.abandoned:
        return "; the handler did not stop within the grace period and was given up on"
    if end.error is not None:
        return f"; stopping, it raised {describe_error(end.error)}"
    return ""


_STOPPED = {
    StopReason.LOST: "the grant was lost",
    StopReason.STOPPING: "the scheduler is shutting down",
    StopReason.REMOVED: "the job was deleted or changed",
    StopReason.TIMED_OUT: "the run timed out",
    StopReason.REPLACED: "a later tick replaced the run",
}


def why_stopped(reason: StopReason | None) -> str:
    """A stop reason as a run's message says it."""
    return _STOPPED.get(reason, str(reason)) if reason is not None else "stopped"


def fenced_patch(run: JobRun) -> dict[str, Any]:
    """`run`'s status patch with the writer's holder and token (when it has a holder)."""
    patch = run.status_patch()
    spec = run.spec.to_dict()
    fence = {k: spec[k] for k in ("holder", "fencingToken") if spec.get(k) not in (None, "")}
    if "holder" in fence:
        patch["spec"] = fence
    return patch


@dataclass(frozen=True)
class RunOutcome:
    """How one run ended, as recorded, with the context its handler was given."""

    job: str
    tick: datetime
    outcome: Outcome
    message: str
    context: JobContext


class Recorder:
    """Writes the JobRuns of one namespace and counts runs."""

    def __init__(self, *, jobruns: JobRunStore, namespace: str, clock: Clock) -> None:
        self._jobruns = jobruns
        self.namespace = namespace
        self.clock = clock
        self.listeners: list[Callable[[RunOutcome], None]] = []
        self.deferred = DeferredRecords(self)
        """Records of runs started off the record (under a shard claim)."""

    async def start_tick(
        self, job: ScheduledJob, *, tick: datetime, holder: str, token: int | None
    ) -> JobRun:
        """Create the Running JobRun of `tick`; AlreadyExists when someone else has it.

        A `Missed` record of the tick (the operator writes one when no run had started by
        the starting deadline) is taken over instead: the caller holds the tick, so the run
        is real now. The takeover is conditional on the record's version, so of two callers
        only one gets it."""
        run = JobRun.for_tick(
            job=job.name,
            tick=tick,
            holder=holder,
            start=self.clock.now(),
            fencing_token=token,
            namespace=self.namespace,
        )
        await self.create_running(run, job.uid)
        return run

    async def abandon_earlier(self, *, holder: str, before: datetime) -> list[str]:
        """Finish `Abandoned` the runs still `Running` under `holder` that started before
        `before`: an earlier process with this identity died with them (a fixed identity
        reused after a restart), and the operator, which abandons runs whose holder vanished,
        sees the holder alive again. Each write is fenced and retried until it lands; the
        names of the runs are returned. Raises KubeError when the runs cannot be listed."""
        abandoned = []
        for item in await self._jobruns.list(namespace=self.namespace):
            try:
                run = JobRun.from_resource(item)
            except ValueError:
                continue
            if run.spec.holder != holder or run.status.outcome is not Outcome.RUNNING:
                continue
            if run.spec.start is None or run.spec.start >= before:
                continue
            message = (
                f"Holder {holder} restarted (a new process with the same identity) before the "
                "run finished."
            )
            await self.finish(run, outcome=Outcome.ABANDONED, message=message)
            abandoned.append(run.name)
        return abandoned

    async def newest_tick(self, job: str, *, below: int) -> datetime | None:
        """The newest tick that the JobRuns of `job` record under a fencing token below
        `below` or none (requests nobody took yet left out); None when there is none. Raises
        KubeError when they cannot be read."""
        ticks = []
        for item in await self._jobruns.list(namespace=self.namespace, job=job):
            spec, status = item.get("spec") or {}, item.get("status") or {}
            if spec.get("job") != job or status.get("outcome") == Outcome.PENDING.value:
                continue
            token = spec.get("fencingToken")
            if isinstance(token, int) and token >= below:
                continue
            with contextlib.suppress(TypeError, ValueError):
                ticks.append(parse_tick(str(spec.get("tick"))))
        return max(ticks, default=None)

    async def create_running(self, run: JobRun, job_uid: str | None) -> None:
        """Create `run` (Running); a `Missed` record of its tick is taken over; any other
        record of the tick raises AlreadyExists. A create whose reply was lost, or one that
        landed at an earlier attempt, counts as done when the record is ours."""
        await self._create(run, run.to_resource(job_uid=job_uid))

    async def _create(self, run: JobRun, body: dict[str, Any]) -> bool:
        """Create `body` (the record of `run`): True when it is written (or a Missed record
        taken over), False when our own record of an earlier attempt is there already;
        AlreadyExists for another run's record, KubeError/TimeoutError when unknown."""
        try:
            await self._jobruns.create(namespace=self.namespace, body=body)
        except AlreadyExists:
            if await self.landed(run):
                return False
            if not await self._take_over_missed(run, body):
                raise
        except (OutcomeUnknown, TimeoutError) as e:
            if not await self.landed(run):
                raise
            _log.info("JobRun create reply lost; it landed", jobrun=run.name, error=repr(e))
        return True

    async def landed(self, run: JobRun) -> bool:
        """Whether our create of `run`, whose reply was lost, is in the store (a GET)."""
        try:
            existing = await self._jobruns.get(namespace=self.namespace, name=run.name)
        except KubeError:
            return False
        spec = (existing or {}).get("spec") or {}
        return bool(
            existing is not None
            and spec.get("holder") == run.spec.holder
            and spec.get("fencingToken") == run.spec.fencing_token
        )

    async def _take_over_missed(self, run: JobRun, body: dict[str, Any]) -> bool:
        """Replace the operator's (or a catch-up's) `Missed` record of `run`'s tick with
        `body`, conditional on its version; False when the record there is another run's
        (or cannot be read: not knowing which, it stays the record) or was taken meanwhile."""
        try:
            existing = await self._jobruns.get(namespace=self.namespace, name=run.name)
        except KubeError:
            return False
        status = (existing or {}).get("status") or {}
        if existing is None or status.get("outcome") != Outcome.MISSED.value:
            return False
        version = (existing.get("metadata") or {}).get("resourceVersion")
        patch = {
            "metadata": {"resourceVersion": version},
            "spec": body["spec"],
            "status": {"message": "", **body["status"]},
        }
        try:
            await self._jobruns.patch_status(namespace=self.namespace, name=run.name, patch=patch)
        except Conflict:
            return False
        return True

    async def start_term(self, job: ScheduledJob, *, token: int, holder: str) -> JobRun:
        """Create the Running JobRun of a single-owner ownership term."""
        run = JobRun.for_term(
            job=job.name,
            fencing_token=token,
            holder=holder,
            start=self.clock.now(),
            namespace=self.namespace,
        )
        try:
            await self._jobruns.create(
                namespace=self.namespace, body=run.to_resource(job_uid=job.uid)
            )
        except AlreadyExists:
            # The Lease was recreated and its transitions started again: this term's record
            # replaces the old one of the same number.
            body = run.to_resource(job_uid=job.uid)
            await self._jobruns.patch_status(
                namespace=self.namespace,
                name=run.name,
                patch={"spec": body["spec"], "status": body["status"]},
            )
        return run

    async def patch_final(self, finished: JobRun) -> None:
        """Patch a run's status (raises KubeError: the caller retries); a record that is gone
        (its job was deleted) is left gone. The patch carries the writer's spec.holder and
        spec.fencingToken: the CRD keeps the spec of a held run fixed, so the write of a
        holder whose run was handed to another (a retry taken over) is refused (422) and
        dropped, never retried."""
        try:
            await self._jobruns.patch_status(
                namespace=self.namespace, name=finished.name, patch=fenced_patch(finished)
            )
        except NotFound:
            _log.debug("JobRun gone before its outcome was written", jobrun=finished.name)
        except Invalid as e:
            _log.info(
                "JobRun status not written: the run is no longer this holder's",
                jobrun=finished.name,
                holder=finished.spec.holder,
                token=finished.spec.fencing_token,
                error=repr(e),
            )

    def update_backlog(self) -> None:
        """Set the backlog gauge: records not written yet."""
        RECORD_BACKLOG.set(self.deferred.pending)

    async def finish(
        self,
        run: JobRun,
        *,
        outcome: Outcome,
        message: str,
        attempts: tuple[Attempt, ...] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """Patch the run's final status; when it cannot be written now (or within `timeout`
        seconds), the records writer (`deferred`) retries it until it lands: a finished run
        never stays Running."""
        finished = run.finish(
            outcome=outcome, end=self.clock.now(), message=message, attempts=attempts
        )
        try:
            await asyncio.wait_for(self.patch_final(finished), timeout)
        except (KubeError, TimeoutError) as e:
            _log.info(
                "JobRun outcome not written yet; retrying off the run path",
                jobrun=run.name,
                outcome=outcome,
                error=repr(e),
            )
            self.deferred.patched(finished)

    async def progress(self, run: JobRun, *, attempts: tuple[Attempt, ...], message: str) -> None:
        """Patch a retried run's attempts so far (still Running); logged, not raised, when it
        cannot be written (its final status carries every attempt anyway)."""
        try:
            await self.patch_final(run.retrying(attempts=attempts, message=message))
        except KubeError as e:
            _log.info("JobRun attempts not written", jobrun=run.name, error=repr(e))

    async def confirm(self, run: JobRun) -> bool:
        """Write `run`'s status (an attempt about to start, marked Running) and confirm it
        landed: a lost reply is read back. False when it was refused or cannot be known."""
        wanted = run.status.to_dict()
        for _ in range(_CONFIRMS):
            try:
                await self._jobruns.patch_status(
                    namespace=self.namespace, name=run.name, patch=fenced_patch(run)
                )
                return True
            except (OutcomeUnknown, TimeoutError) as e:
                _log.info(
                    "JobRun attempt mark reply lost; reading back", jobrun=run.name, error=repr(e)
                )
            except KubeError as e:
                _log.info("JobRun attempt mark not written", jobrun=run.name, error=repr(e))
                if not isinstance(e, Unavailable):
                    return False
            try:
                stored = await self._jobruns.get(namespace=self.namespace, name=run.name)
            except (KubeError, TimeoutError):
                continue
            spec, status = (stored or {}).get("spec") or {}, (stored or {}).get("status") or {}
            if spec.get("holder") != run.spec.holder or (
                spec.get("fencingToken") != run.spec.fencing_token
            ):
                return False
            if status.get("attempts") == wanted.get("attempts"):
                return True
        return False

    def record_later(self, run: JobRun, *, job_uid: str | None) -> None:
        """Write `run` (with its final outcome) once the store answers, with retries; never
        dropped. A `Missed` record of the same tick is taken over; any other is kept."""
        self.deferred.ended(run, job_uid=job_uid)

    @property
    def backlog(self) -> int:
        """Records waiting to be written."""
        return self.deferred.pending

    async def flush(self, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to `timeout` seconds for the waiting records to be written; True when
        they are."""
        return await self.deferred.flush(timeout=timeout)

    async def close(self) -> None:
        """Stop writing (what is left is logged)."""
        await self.deferred.close()

    async def write_final(self, run: JobRun, job_uid: str | None) -> None:
        """Create the finished `run`, or take over a `Missed` record of its tick (raises
        KubeError: the caller retries)."""
        try:
            if not await self._create(run, run.to_resource(job_uid=job_uid)):
                # Our own Running record of an earlier attempt: it gets the outcome.
                await self.patch_final(run)
        except AlreadyExists:
            pass  # another run on record stays the record

    def count(
        self,
        job: ScheduledJob,
        ctx: JobContext,
        outcome: Outcome,
        message: str,
        *,
        notify: bool = True,
    ) -> None:
        """Count a finished run in RUNS and (unless `notify` is False) tell the listeners."""
        RUNS.labels(self.namespace, job.name, job.spec.bucket.value, outcome.value).inc()
        if notify:
            self.notify(job, ctx, outcome, message)

    def notify(self, job: ScheduledJob, ctx: JobContext, outcome: Outcome, message: str) -> None:
        """Tell the listeners (`run_once` is one) that a run finished and was recorded."""
        run = RunOutcome(job=job.name, tick=ctx.tick, outcome=outcome, message=message, context=ctx)
        for listener in list(self.listeners):
            listener(run)
