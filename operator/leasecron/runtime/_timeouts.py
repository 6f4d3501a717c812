"""spec.timeout of a run, and the grace a handler gets once the runtime tells it to stop
before its run is over (a timeout, or a later tick that replaces it).

Owns `Timeout` (how long one attempt of a run may take, and how it is stopped after that) and
`stop_grace`: `min(STOP_GRACE, the scheduler's grace period)`. A timed-out attempt is told to
stop the way a lost grant or a shutdown tells it (`ctx.lost` is set; an async handler's task is
cancelled) and, when it has not ended after the stop grace, it is given up on: a sync handler
in the thread pool cannot be killed, so its thread is left running while the run is recorded
`TimedOut` and its grant is released as for any abandoned handler.

It does not start timers itself (`_invoke.RunControl.run` does), and a timeout is independent
of `lock.atMostFor`, which stays the bound of the claim (and of all attempts of a tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from leasecron.models.durations import format_duration
from leasecron.models.specs import ScheduledJob

STOP_GRACE = 10.0
"""Seconds at most between telling a handler to stop (timeout, Replace) and giving up on it;
the scheduler's grace period when that is shorter."""


def stop_grace(grace_period: float) -> float:
    """The grace a handler told to stop before its run is over gets."""
    return max(0.0, min(STOP_GRACE, grace_period))


@dataclass(frozen=True, kw_only=True)
class Timeout:
    """How long one attempt may run (`seconds`), and how long it then has to stop (`grace`)."""

    seconds: float
    grace: float
    limit: timedelta

    @property
    def note(self) -> str:
        """How the run's message says it: "after 30s"."""
        return f"after {format_duration(self.limit)}"


def timeout_of(job: ScheduledJob, *, grace_period: float) -> Timeout | None:
    """The timeout of each attempt of `job`'s runs; None when spec.timeout is unset."""
    limit = job.spec.timeout
    if limit is None:
        return None
    return Timeout(seconds=limit.total_seconds(), grace=stop_grace(grace_period), limit=limit)
