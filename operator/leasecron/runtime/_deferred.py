"""Run records written off the start path: the JobRuns of runs whose tick a shard claim
already guarantees (docs/design.md §4).

A handler under such a claim starts at once; its JobRun is queued and written by a few
writer tasks in the order the runs started: one create (with the final outcome when the run
ended before the create went out, else `Running` and then one status patch), and the
records of runs that ended while the store was out of reach (`ended`). A `Missed`
record of the tick (the operator's, when the record came late) is taken over, as the
Recorder does for records written later. A failed write is retried with back-off until it
lands; nothing is dropped. The queue is bounded (`DEFERRED_LIMIT`): when it is full, `start`
says so and the caller records the run on the start path instead. Pending records count in
the `leasecron_record_backlog` gauge.

The queue lives in memory: a replica that dies with records pending loses them, and the
operator records those ticks as Missed (docs/design.md §6). It does not decide whether a run may
start: the claim did.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from leasecron._logs import get_logger
from leasecron.kube.errors import AlreadyExists, KubeError
from leasecron.models.specs import Attempt, JobRun, Outcome, ScheduledJob

if TYPE_CHECKING:
    from leasecron.runtime._records import Recorder

_log = get_logger("leasecron.runtime.records")
DEFERRED_LIMIT = 10_000
WRITERS = 3
"""Records written concurrently (the API server takes a few hundred writes per second)."""
_RETRY_FIRST, _RETRY_CAP = 0.25, 2.0
_POLL = 0.05
_YIELD_MAX_S = 2.0
"""How long a record write waits at most for the run starts queued before it."""


async def _at_once(_timeout: float) -> None:
    """No run starts to wait for."""


class DeferredRun:
    """One run's record on its way to the store. Its JobRun bodies (`run`, the create's;
    `final`, the outcome's) are made when first asked for, which for a run under a shard
    claim is by a writer, off the start path."""

    def __init__(
        self,
        *,
        job_uid: str | None,
        run: JobRun | None = None,
        make: Callable[[], JobRun] | None = None,
        final: JobRun | None = None,
        created: bool = False,
    ) -> None:
        if run is None and make is None:
            raise ValueError("a deferred run needs its JobRun or the means to make it")
        self.job_uid = job_uid
        self._run, self._make = run, make
        self._final = final
        self._end: Callable[[JobRun], JobRun] | None = None
        self.latest: JobRun | None = None
        """The attempts so far of a retried run, not written yet (while it still goes)."""
        self.created = created
        self.done = False
        self.writing = False
        self.queued = True

    @property
    def run(self) -> JobRun:
        """The record as created (Running)."""
        if self._run is None:
            assert self._make is not None
            self._run, self._make = self._make(), None
        return self._run

    @property
    def final(self) -> JobRun | None:
        """The record with the run's outcome; None while the run goes on."""
        if self._final is None and self._end is not None:
            self._final, self._end = self._end(self.run), None
        return self._final

    @property
    def ended(self) -> bool:
        """Whether the run has ended (without making its final record)."""
        return self._final is not None or self._end is not None

    def end(self, finish: Callable[[JobRun], JobRun]) -> None:
        """The run ended: `finish` makes its final record from the created one."""
        self._final, self._end = None, finish

    @property
    def name(self) -> str:
        return self.run.name


class DeferredRecords:
    """The queue and writers of the records of one Recorder's runs started off the record."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._todo: deque[DeferredRun] = deque()
        self._pending: set[DeferredRun] = set()
        self._writers: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.starts_idle: Callable[[float], Awaitable[None]] = _at_once
        """Returns once no run start waits its turn, or after the seconds given (`Services`
        sets it to its `StartPacer.idle`): each write waits for it (up to `_YIELD_MAX_S`).
        A large instant's starts come first; its records, and the API server's work on
        them, after."""

    @property
    def pending(self) -> int:
        """Records not written in full yet."""
        return len(self._pending)

    def start(
        self, job: ScheduledJob, *, tick: datetime, holder: str, token: int | None, now: datetime
    ) -> DeferredRun | None:
        """Queue the Running record of `tick`; None when the queue is full (record it on the
        start path instead)."""
        if len(self._pending) >= DEFERRED_LIMIT:
            _log.warning("deferred record queue full; recording on the start path", job=job.name)
            return None
        make = functools.partial(
            JobRun.for_tick,
            job=job.name,
            tick=tick,
            holder=holder,
            start=now,
            fencing_token=token,
            namespace=self._recorder.namespace,
        )
        entry = DeferredRun(make=make, job_uid=job.uid)
        self._pending.add(entry)
        self._queue(entry)
        return entry

    def ended(self, run: JobRun, *, job_uid: str | None) -> None:
        """Queue the record of a run that has already ended (`run` carries its outcome), e.g.
        one that ran unguarded while the store was out of reach. Never refused: such runs
        are at most one per tick and job while the store is away."""
        entry = DeferredRun(run=run, job_uid=job_uid, final=run)
        self._pending.add(entry)
        self._queue(entry)

    def patched(self, final: JobRun) -> None:
        """Queue the final status of a run whose record exists already (created on the
        start path) and whose patch did not land: retried until it does."""
        entry = DeferredRun(run=final, job_uid=None, final=final, created=True)
        self._pending.add(entry)
        self._queue(entry)

    def finish(
        self,
        entry: DeferredRun,
        *,
        outcome: Outcome,
        message: str,
        now: datetime,
        attempts: tuple[Attempt, ...] | None = None,
    ) -> None:
        """The run ended: its final status goes out with the create, or as a patch after it."""
        entry.end(
            functools.partial(
                JobRun.finish, outcome=outcome, end=now, message=message, attempts=attempts
            )
        )
        entry.latest = None
        self._queue_idle(entry)

    def progress(self, entry: DeferredRun, *, attempts: tuple[Attempt, ...], message: str) -> None:
        """A retried run's attempts so far (still Running): patched after the create, in
        order with the final status (one write at a time per record)."""
        if entry.ended:
            return
        entry.latest = entry.run.retrying(attempts=attempts, message=message)
        self._queue_idle(entry)

    def _queue_idle(self, entry: DeferredRun) -> None:
        """Queue a created record's next write unless one is queued or on the wire (the
        writer queues it again when that one is done): one write at a time per record, so
        that a progress patch never lands after the final one."""
        if entry.created and not entry.queued and not entry.writing:
            self._queue(entry)

    async def written(self, entry: DeferredRun, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to `timeout` seconds until `entry`'s create and its queued patches are
        written (so that a write awaited next lands after them); True when they are."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        while not entry.created or entry.queued or entry.writing or entry.latest is not None:
            if entry.done or loop.time() >= until:
                return False
            self._wake.set()
            await asyncio.sleep(_POLL)
        return True

    def _queue(self, entry: DeferredRun) -> None:
        entry.queued = True
        self._todo.append(entry)
        self._drained.clear()
        self._recorder.update_backlog()
        self._wake.set()
        loop = asyncio.get_running_loop()
        while len(self._writers) < WRITERS and len(self._writers) < len(self._todo):
            task = loop.create_task(self._write_loop(), name="leasecron deferred records")
            self._writers.add(task)
            task.add_done_callback(self._writers.discard)

    async def flush(self, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to `timeout` seconds until every record is written; True when it is."""
        if self._pending:
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), timeout)
        return not self._todo

    async def close(self) -> None:
        writers = list(self._writers)
        for task in writers:
            task.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        if self._todo:
            _log.error("run records not written at shutdown", jobruns=[e.name for e in self._todo])

    async def _write_loop(self) -> None:
        delay = _RETRY_FIRST
        while self._todo:
            await self.starts_idle(_YIELD_MAX_S)
            if not self._todo:
                break
            entry = self._todo.popleft()
            entry.queued = False
            entry.writing = True
            try:
                await self._write(entry)
            except (KubeError, TimeoutError) as e:
                _log.info("run record not written yet", jobrun=entry.name, error=repr(e))
                self._todo.appendleft(entry)
                entry.queued = True
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                delay = min(_RETRY_CAP, delay * 2)
                continue
            finally:
                entry.writing = False
            delay = _RETRY_FIRST
            if entry.done:
                self._pending.discard(entry)
            elif (entry.ended or entry.latest is not None) and not entry.queued:
                self._queue(entry)  # the run ended (or retried) while its create was on the way
            self._recorder.update_backlog()
        if not self._todo and all(t.done() or t is asyncio.current_task() for t in self._writers):
            self._drained.set()

    async def _write(self, entry: DeferredRun) -> None:
        recorder = self._recorder
        if entry.created and entry.final is None:
            latest, entry.latest = entry.latest, None
            if latest is not None:
                try:
                    await recorder.patch_final(latest)
                except (KubeError, TimeoutError):
                    entry.latest = entry.latest or latest
                    raise
            return
        if entry.created:
            assert entry.final is not None
            await recorder.patch_final(entry.final)
            entry.done = True
            return
        if entry.final is not None:
            await recorder.write_final(entry.final, entry.job_uid)
            entry.created = entry.done = True
            return
        try:
            await recorder.create_running(entry.run, entry.job_uid)
        except AlreadyExists:
            _log.error(
                "another record of this tick exists; this run is not recorded",
                jobrun=entry.name,
                holder=entry.run.spec.holder,
            )
            entry.created = entry.done = True
            return
        entry.created = True
