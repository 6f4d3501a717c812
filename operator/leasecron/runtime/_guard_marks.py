"""`GuardMarks`: what this process has seen claimed on one guard Lease, kept when the Lease is
deleted, so that a tick the guard ran is not run again and a token is not handed out again.

A guard Lease's tick annotation is its high-water mark and its `leaseTransitions` the token
of its latest grant; both are gone with the Lease (`kubectl delete lease`). Every process of
the guard sees every claim through its watch-fed Lease cache, so each keeps the highest token
and the latest tick it saw (`note`, fed by the shared view's watch of the Lease, its own
writes included): a claim of a tick at or before that mark is `taken`
(`claimed`), and a Lease created again starts above that token (`token`, the guard
TickLock's token floor, with the job's floor for a `job=` guard).

What it does not promise: a Lease deleted while no process of the guard had seen its last
claim (all of them restarted since) is not remembered; a `job=` guard still has its JobRuns
(a tick on record is `exists`, and its token floor reads them), a plain guard has no other
record. Pure bookkeeping: no I/O, no clock but the `now` given.
"""

from __future__ import annotations

from datetime import datetime

from leasecron.models.decisions import FUTURE_TICK_LIMIT
from leasecron.models.leases import LeaseRecord


class GuardMarks:
    """The highest token and latest tick seen on one guard Lease by this process."""

    def __init__(self) -> None:
        self.token = 0
        self.tick: datetime | None = None

    def note(self, record: LeaseRecord | None, *, now: datetime) -> None:
        """A version of the Lease was seen (None: it was deleted: the marks stay). A tick more
        than `FUTURE_TICK_LIMIT` ahead of `now` is corrupt and ignored, as a claim does."""
        if record is None:
            return
        self.token = max(self.token, record.transitions)
        tick = record.tick
        if tick is None or tick > now + FUTURE_TICK_LIMIT:
            return
        if self.tick is None or tick > self.tick:
            self.tick = tick

    def claimed(self, tick: datetime) -> bool:
        """Whether `tick` is at or before the latest tick seen claimed."""
        return self.tick is not None and tick <= self.tick
