"""Retries handed over: a once-per-tick run whose holder vanished during a retry back-off,
made a retry request that another replica picks up (docs/design.md §5.16).

The holder records every attempt in `status.attempts`, and before a retry starts it records
that attempt as `Running`, confirmed (`runtime._retries`). So a run whose last attempt entry
is finished `Failed` or `TimedOut`, with attempts left, is a run whose holder died in the
back-off: no attempt of it is going, and the next one may run elsewhere. One whose last entry
is `Running` (or that has none) may have a handler going: it is `Abandoned`, never retried.

The operator turns such a run into a retry request with one resourceVersion-conditional
update (`handover_patch`): `status.outcome: Pending` (its attempts kept), the label
`leasecron.dev/trigger=Retry` (so replicas' request pickup watches it; `spec.trigger` stays
what it was). A replica takes it as it takes a requested run, under a new claim of the shard
(a new, higher fencing token: a token is unchanged only within one holder's attempts), and
its attempts continue the numbering. The retry is due until `Handover.until`: the last
attempt's end + the next delay + startingDeadline, capped at the job's next tick unless
concurrencyPolicy is Allow; one nobody took by then is finished with the last attempt's
outcome (`unclaimed_patch`), not Missed. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from leasecron.models._enums import ConcurrencyPolicy, Outcome
from leasecron.models._jobruns import Attempt, JobRun
from leasecron.models._parts import RetrySpec
from leasecron.models.names import LABEL_TRIGGER, TRIGGER_RETRY, format_tick
from leasecron.models.schedules import Schedule

HANDED_OVER = (Outcome.FAILED, Outcome.TIMED_OUT)
"""The outcomes of a last attempt that leave the run to be retried."""


@dataclass(frozen=True, kw_only=True)
class Handover:
    """The next attempt of a run: not before `at` (the back-off after the last attempt) and
    started by `until`."""

    attempt: int
    last: Attempt
    until: datetime
    at: datetime


def next_retry(
    *,
    attempts: tuple[Attempt, ...],
    retry: RetrySpec,
    tick: datetime | None,
    schedule: Schedule | None,
    policy: ConcurrencyPolicy,
    starting_deadline: timedelta,
) -> Handover | None:
    """The retry still owed to a run that made `attempts`, None when there is none: no
    attempt recorded, the last not finished as retried, none left, or no end to count from."""
    if not attempts or retry.limit <= 0:
        return None
    last = attempts[-1]
    if last.outcome not in HANDED_OVER or last.end is None or len(attempts) > retry.limit:
        return None
    attempt = len(attempts) + 1
    at = last.end + retry.delay(attempt)
    until = at + starting_deadline
    if policy is not ConcurrencyPolicy.ALLOW and schedule is not None and tick is not None:
        until = min(until, schedule.next_after(tick))
    return Handover(attempt=attempt, last=last, until=until, at=at)


def is_retry_request(obj: Mapping[str, Any]) -> bool:
    """Whether a raw JobRun carries the Retry label (a handed-over run)."""
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return isinstance(labels, Mapping) and labels.get(LABEL_TRIGGER) == TRIGGER_RETRY


def handover_message(*, holder: str, handover: Handover) -> str:
    return (
        f"Holder {holder or '(none)'} vanished during the retry back-off after attempt "
        f"{handover.attempt - 1} ended {handover.last.outcome.value}; attempt "
        f"{handover.attempt} is handed to another replica (due by {format_tick(handover.until)})."
    )


def handover_patch(*, resource_version: str, message: str) -> dict[str, Any]:
    """The conditional update that makes a run a retry request: Pending (attempts kept),
    labelled Retry."""
    return {
        "metadata": {
            "resourceVersion": resource_version,
            "labels": {LABEL_TRIGGER: TRIGGER_RETRY},
        },
        "status": {"outcome": Outcome.PENDING.value, "message": message},
    }


def unclaimed_patch(
    run: JobRun, *, resource_version: str, handover: Handover, now: datetime
) -> dict[str, Any]:
    """Finish a retry request nobody took by its bound with its last attempt's outcome."""
    last = handover.last
    message = (
        f"{last.message} (attempt {handover.attempt - 1}; attempt {handover.attempt} was "
        f"handed over but no replica started it by {format_tick(handover.until)})"
    ).lstrip()
    finished = run.finish(
        outcome=last.outcome, end=now, message=message, attempts=run.status.attempts
    )
    patch = finished.status_patch()
    patch["metadata"] = {"resourceVersion": resource_version}
    return patch
