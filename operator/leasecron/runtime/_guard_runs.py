"""What a guard hands back: `GuardRun` (one claim, held or not) and `GuardResult` (one call
of a guarded function), and `current_run()`.

A skipped tick is a value, never an exception (ShedLock's `lock() -> Lock | None`): both
objects are falsy then, and `reason` says why (the SKIPS reasons: `taken`, `live_grant`,
`deadline`, `conflict`, `exists`, `store_unavailable`, `uncertain`, `suspended`, `no_job`,
`record_failed`, `error`). A held run carries the grant's fencing token and its run's fence
(`runtime._shardfences.RunFence`: the grant, bounded by `at_most_for` from the start unless
kept alive), whose `lost` event it shows; `assert_held()` checks the fence's local deadline
as well as the event (docs/design.md §5).

It does not renew or release anything: the guard's engine does (`_guard_engine`).
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from leasecron.coordination import Grant, KeepAlive, LostEvent, LostLockError
from leasecron.coordination.grants import Fence
from leasecron.models.names import format_tick
from leasecron.models.specs import Bucket
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._hooks import RunEvent, RunEventKind
from leasecron.runtime._tick_records import TickRecord
from leasecron.runtime._tracing import RunSpan

T = TypeVar("T")

REASON_SUSPENDED = SkipReason.SUSPENDED
REASON_NO_JOB = SkipReason.NO_JOB
REASON_RECORD_FAILED = SkipReason.RECORD_FAILED
REASON_ERROR = SkipReason.ERROR

_CURRENT: contextvars.ContextVar[GuardRun] = contextvars.ContextVar("leasecron_guard_run")


class GuardRun:
    """One claim of one tick by one guard: truthy when this replica holds the tick.

    `token` is the grant's fencing token (None when not held), `holder` this replica's
    identity when held, else the holder the Lease showed, `reason` why not ("" when held)."""

    def __init__(
        self,
        *,
        guard: str,
        namespace: str,
        tick: datetime,
        reason: str = "",
        holder: str = "",
        grant: Grant | None = None,
        job: str | None = None,
    ) -> None:
        self.guard = guard
        self.namespace = namespace
        self.tick = tick
        self.reason = reason
        self.job = job
        self.grant = grant
        self.holder = grant.holder if grant is not None else holder
        self.keep_alive: KeepAlive | None = None
        self.fence: Fence | None = grant
        self.watchdog: asyncio.Task[None] | None = None
        self.start_by: datetime | None = None
        self.started = 0.0
        self.record: TickRecord | None = None
        self.span = RunSpan(None)
        """Set while the run is held: its keep-alive, fence and the task that ends it at its
        atMostFor, its start-by time, start (local
        monotonic), its JobRun's `TickRecord` (by the engine) and its span (by the guard,
        when the body starts)."""
        self._lost_unset = LostEvent()
        self._lost_unset.set()

    @property
    def lost(self) -> LostEvent:
        """Set once the run may no longer act: its grant lost or expired, or its atMostFor
        reached (always set for a skipped tick)."""
        return self.fence.lost if self.fence is not None else self._lost_unset

    @property
    def ran(self) -> bool:
        """Whether this replica got the tick (the body runs, or ran, under this claim)."""
        return self.grant is not None

    def __bool__(self) -> bool:
        return self.ran

    @property
    def token(self) -> int | None:
        return self.grant.token if self.grant is not None else None

    def event(self, *, skipped_by: str | None = None) -> RunEvent:
        """This run's `started` event (`runtime._observe`), or with `skipped_by` (this
        replica's identity) its tick's `skipped` one: its job is the ScheduledJob of a `job=`
        guard, else the guard's name (the name its metrics carry); once-per-tick, the
        guard's promise."""
        skip = skipped_by is not None
        return RunEvent(
            kind=RunEventKind.SKIPPED if skip else RunEventKind.STARTED,
            job=self.job or self.guard,
            namespace=self.namespace,
            tick=self.tick,
            holder=skipped_by or self.holder,
            bucket=Bucket.ONCE_PER_TICK,
            token=None if skip else self.token,
            reason=self.reason if skip else None,
        )

    @property
    def held(self) -> bool:
        """Whether the run's fence is still current: its grant not lost, released or past its
        local deadline, and its atMostFor not reached. False for a skipped tick."""
        return self.fence is not None and self.fence.held

    def assert_held(self) -> None:
        """Raise LostLockError unless the grant is still current; call it before a write
        that must not happen twice, and pass `token` where the store can check it."""
        if self.fence is None:
            raise LostLockError(
                f"guard {self.guard!r}: tick {format_tick(self.tick)} was not claimed "
                f"({self.reason})"
            )
        self.fence.assert_held()

    def __repr__(self) -> str:
        state = f"token={self.token}" if self.ran else f"reason={self.reason!r}"
        return f"GuardRun({self.guard!r}, tick={format_tick(self.tick)}, {state})"


@dataclass(frozen=True)
class GuardResult(Generic[T]):
    """One call of a guarded function: `ran`, the body's return `value` (None when it did
    not run), `reason` ("" when it ran, else why not), `tick`, `token` and `holder`.
    Truthy exactly when the body ran."""

    ran: bool
    value: T | None
    reason: str
    tick: datetime
    token: int | None
    holder: str

    def __bool__(self) -> bool:
        return self.ran

    @classmethod
    def of(cls, run: GuardRun, value: T | None = None) -> GuardResult[T]:
        return cls(
            ran=run.ran,
            value=value,
            reason=run.reason,
            tick=run.tick,
            token=run.token,
            holder=run.holder,
        )


def current_run() -> GuardRun:
    """The run of the guarded body that calls it (in its thread or task); RuntimeError
    outside a guarded body."""
    run = _CURRENT.get(None)
    if run is None:
        raise RuntimeError("current_run() is only available inside a guarded body")
    return run


def enter(run: GuardRun) -> contextvars.Token[GuardRun]:
    """Make `run` the current run of this thread or task (undo with `leave`)."""
    return _CURRENT.set(run)


def leave(token: contextvars.Token[GuardRun]) -> None:
    _CURRENT.reset(token)
