"""`JobContext`: what a handler receives for one run.

Owns the per-run values a handler may rely on (job, namespace, tick, fencing token, holder),
the `lost` event that tells a handler its grant is gone or the scheduler is stopping, the
bound logger and the idempotency key. It does not renew anything: the runtime keeps the
grant alive and sets `lost` when it cannot. `assert_held()` is only as fresh as the last
renewal this process saw (docs/design.md §7): it narrows the window for stale writes, it does not
close it; the fencing token is what a store can check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from leasecron.coordination import LostEvent, LostLockError
from leasecron.models.names import format_tick
from leasecron.models.specs import Bucket, Trigger


def _default_logger() -> Any:
    return structlog.get_logger("leasecron.job")


@dataclass(frozen=True, kw_only=True, eq=False)
class JobContext:
    """One run of a handler.

    `tick` is the scheduled instant (aware, UTC) for tick-driven runs, and the start of the
    ownership term for single-owner jobs. `token` is the fencing token (the Lease's
    leaseTransitions of this grant); None for every-replica runs and unguarded runs.
    `lost` (a threading.Event that can also be awaited with `wait_async`) is set when the
    handler must stop: the grant was lost, the job was deleted or suspended (single-owner),
    or the scheduler is shutting down, the attempt ran past the job's spec.timeout, or a
    later tick replaces the run (concurrencyPolicy: Replace). `attempt` counts the attempts
    of a retried run (spec.retry) from 1; every attempt under one holder's claim has the same
    token (an attempt handed over to another replica has that replica's higher one).
    `trigger` says why the run happens: `Schedule` for a tick of the schedule, `Manual`
    (`leasecron run`) or `Backfill` for a requested one, whose `requested_by` names who asked
    (None for scheduled runs).
    """

    job: str
    namespace: str
    tick: datetime
    holder: str
    bucket: Bucket
    token: int | None = None
    handler: str = ""
    unguarded: bool = False
    attempt: int = 1
    trigger: Trigger = Trigger.SCHEDULE
    requested_by: str | None = None
    lost: LostEvent = field(default_factory=LostEvent)
    logger: Any = field(default_factory=_default_logger)
    held: Callable[[], bool] | None = field(default=None, repr=False)
    """The runtime's check that the grant is still current (None: nothing to hold)."""

    @property
    def cancelled(self) -> bool:
        """True once the handler should stop (same as `lost.is_set()`)."""
        return self.lost.is_set()

    @property
    def idempotency_key(self) -> str:
        """A key unique to this run's unit of work: `<namespace>/<job>/<tick RFC 3339>` for
        ticks, `<namespace>/<job>/term-<token>` for a single-owner ownership term."""
        if self.bucket is Bucket.SINGLE_OWNER and self.token is not None:
            return f"{self.namespace}/{self.job}/term-{self.token}"
        return f"{self.namespace}/{self.job}/{format_tick(self.tick)}"

    def assert_held(self) -> None:
        """Raise LostLockError unless this run's grant is still current. Call it before a
        write that must not happen twice; pass `token` along where the store can check it."""
        if self.lost.is_set():
            raise LostLockError(f"{self.job}: the grant for {self._what()} is gone")
        if self.held is not None and not self.held():
            self.lost.set()
            raise LostLockError(f"{self.job}: the grant for {self._what()} is no longer held")

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block a sync handler for up to `timeout` seconds or until `lost` is set; True when
        it is set. A sleep that ends early on handover, for polling loops. Async handlers
        use `await ctx.lost.wait_async(timeout)` (or just sleep: they are cancelled)."""
        return self.lost.wait(timeout)

    def _what(self) -> str:
        if self.token is None:
            return f"tick {format_tick(self.tick)}"
        return f"tick {format_tick(self.tick)} (token {self.token})"
