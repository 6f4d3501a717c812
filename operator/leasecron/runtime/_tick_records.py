"""`TickRecord`: one tick's JobRun from open to close, the one writer of a run's record
whichever path claimed the tick (the run path `Services.run_tick`, a `job=` guard's engine).

Owns how a tick's run is recorded (`RecordMode`, docs/design.md §4): the record opened before
the run starts (created, queued off the start path, or taken up), its progress and the marks
of its retries, and its close with the outcome; the `Missed` records of ticks claimed and not
run (`record_missed`), a tick whose create may have landed unconfirmed among them. Every
write that cannot land now goes to the record writer (`Recorder.deferred`), retried there
until it does. It does not decide whether a tick runs, nor count its outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from leasecron._logs import get_logger
from leasecron._metrics import MISSED
from leasecron.kube.errors import AlreadyExists, KubeError, OutcomeUnknown
from leasecron.models.names import format_tick
from leasecron.models.specs import Attempt, JobRun, Outcome, ScheduledJob
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._deferred import DeferredRun
from leasecron.runtime._records import Recorder

_log = get_logger("leasecron.runtime.records")
MARK_WAIT = 10.0
"""Seconds a run recorded off the start path waits for its record to be written before the
mark of its next attempt (which must land after it)."""
MISSED_LATE = "no replica started this tick before its startingDeadline"
MISSED_ENDED = "the claim's grant ended (expired, lost or shut down) before this tick could start"
MISSED_UNCONFIRMED = (
    "the tick's run record could not be confirmed (its create's reply was lost), so the "
    "handler was not started"
)


class RecordMode(Enum):
    """How a tick's run is recorded (docs/design.md §4)."""

    NONE = "none"
    """every-replica: counted in metrics, not recorded."""
    GUARDED = "guarded"
    """Under a grant or term: the JobRun is created first; no record, no run."""
    UNGUARDED = "unguarded"
    """RunLocally: AlreadyExists stops the run; a create that cannot reach the store does
    not, and the record is written later."""
    DEFERRED = "deferred"
    """Under a shard claim, which already guarantees the tick: the run starts at once and
    its JobRun is written off the start path (`Recorder.deferred`); GUARDED when that queue
    is full."""
    TAKEN = "taken"
    """The JobRun exists and is this replica's already (a run request its pickup made
    Running); the run writes its attempts and outcome to it."""


def record_missed(
    recorder: Recorder,
    job: ScheduledJob,
    ticks: Sequence[datetime],
    *,
    holder: str,
    token: int | None,
    reason: str,
) -> None:
    """Queue a `Missed` JobRun for each of `ticks` (as their claimant `holder`, with
    `token`): off the start path, retried until it is written; a record of the tick already
    there stays the record."""
    if not ticks:
        return
    for tick in ticks:
        run = JobRun.for_tick(
            job=job.name,
            tick=tick,
            holder=holder,
            start=None,
            fencing_token=token,
            namespace=recorder.namespace,
            outcome=Outcome.MISSED,
            message=reason,
        )
        MISSED.labels(recorder.namespace, job.name).inc()
        recorder.deferred.ended(run, job_uid=job.uid)
    _log.info(
        "missed ticks recorded",
        job=job.name,
        namespace=recorder.namespace,
        holder=holder,
        token=token,
        missed=len(ticks),
        reason=reason,
    )


@dataclass(kw_only=True)
class TickRecord:
    """The record of one run of `job`'s `tick` by `holder` under `token`, as `mode` says
    (DEFERRED becomes GUARDED when the queue off the start path is full). `timeout`: seconds
    its create and its close may take on the run's path (None: the client's own bound); a
    close that takes longer is left to the record writer. One per run."""

    recorder: Recorder
    job: ScheduledJob
    tick: datetime
    holder: str
    token: int | None
    mode: RecordMode
    run: JobRun | None = None
    """The JobRun written on the start path, or taken up (TAKEN)."""
    deferred: DeferredRun | None = None
    """The JobRun queued off the start path (DEFERRED)."""
    timeout: float | None = None

    async def open(self) -> SkipReason | None:
        """Queue, write or take up the record; None when the run may start, else why not: its
        run is on record already (EXISTS), or a guarded run's record was not made
        (RECORD_FAILED; a create whose reply was lost may have landed, so the tick is recorded
        Missed, never left Running). An unguarded run goes on without its record."""
        recorder, job, tick = self.recorder, self.job, self.tick
        if self.mode is RecordMode.DEFERRED:
            self.deferred = recorder.deferred.start(
                job, tick=tick, holder=self.holder, token=self.token, now=recorder.clock.now()
            )
            if self.deferred is None:
                self.mode = RecordMode.GUARDED
        if self.mode not in (RecordMode.GUARDED, RecordMode.UNGUARDED):
            return None
        start = recorder.start_tick(job, tick=tick, holder=self.holder, token=self.token)
        try:
            self.run = await asyncio.wait_for(start, self.timeout)
        except AlreadyExists:
            return SkipReason.EXISTS
        except (KubeError, TimeoutError) as e:
            if self.mode is not RecordMode.GUARDED:
                return None
            _log.warning(
                "JobRun not created; tick not run",
                job=job.name,
                tick=format_tick(tick),
                error=repr(e),
            )
            if isinstance(e, OutcomeUnknown | TimeoutError):
                self.missed(MISSED_UNCONFIRMED)
            return SkipReason.RECORD_FAILED
        return None

    def missed(self, reason: str) -> None:
        """The tick is not run: recorded `Missed` (a record of it already there stays)."""
        ticks = (self.tick,)
        record_missed(
            self.recorder, self.job, ticks, holder=self.holder, token=self.token, reason=reason
        )

    async def progress(self, attempts: tuple[Attempt, ...], message: str) -> None:
        """A retried run's attempts so far (still Running); a run without a record writes
        nothing."""
        if self.deferred is not None:
            self.recorder.deferred.progress(self.deferred, attempts=attempts, message=message)
        elif self.run is not None:
            await self.recorder.progress(self.run, attempts=attempts, message=message)

    async def mark(self, attempts: tuple[Attempt, ...], message: str) -> bool:
        """Write the attempts so far plus the next one, Running, and confirm it landed (a
        queued record and its patches are written first); a run without a record goes on."""
        record = self.run
        if self.deferred is not None:
            if not await self.recorder.deferred.written(self.deferred, timeout=MARK_WAIT):
                return False
            record = self.deferred.run
        if record is None:
            return True
        return await self.recorder.confirm(record.retrying(attempts=attempts, message=message))

    async def close(
        self,
        outcome: Outcome,
        message: str,
        *,
        attempts: tuple[Attempt, ...] | None = None,
        started: datetime | None = None,
    ) -> None:
        """Finish the record with the outcome. An unguarded run that `started` without one
        (its create did not reach the store) has its record written later, off the path."""
        recorder = self.recorder
        if self.deferred is not None:
            recorder.deferred.finish(
                self.deferred,
                outcome=outcome,
                message=message,
                now=recorder.clock.now(),
                attempts=attempts,
            )
        elif self.run is not None:
            await recorder.finish(
                self.run, outcome=outcome, message=message, attempts=attempts, timeout=self.timeout
            )
        elif self.mode is RecordMode.UNGUARDED and started is not None:
            later = JobRun.for_tick(
                job=self.job.name,
                tick=self.tick,
                holder=self.holder,
                start=started,
                namespace=recorder.namespace,
            ).finish(outcome=outcome, end=recorder.clock.now(), message=message, attempts=attempts)
            recorder.record_later(later, job_uid=self.job.uid)
