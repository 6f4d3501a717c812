"""The enumerations of the leasecron resources, by their user-facing values (docs/design.md §3, §4).

Owns the names only; what each value makes happen is decided by the runtime and the operator.
"""

from __future__ import annotations

from enum import StrEnum


class Bucket(StrEnum):
    """How a job runs across the replicas of its group."""

    EVERY_REPLICA = "every-replica"
    ONCE_PER_TICK = "once-per-tick"
    SINGLE_OWNER = "single-owner"


class CatchUpPolicy(StrEnum):
    """What runs for ticks missed while no replica could run them."""

    NONE = "None"
    LATEST = "Latest"
    ALL = "All"


class ConcurrencyPolicy(StrEnum):
    """What a tick does while the job's run of an earlier tick still goes (CronJob's names)."""

    FORBID = "Forbid"
    REPLACE = "Replace"
    ALLOW = "Allow"


class Trigger(StrEnum):
    """Why a run happens: its schedule, a person's request (`leasecron run`), or a backfill."""

    SCHEDULE = "Schedule"
    MANUAL = "Manual"
    BACKFILL = "Backfill"


class StoreUnavailablePolicy(StrEnum):
    """What a coordinated job does while the API server cannot be reached."""

    SKIP = "Skip"
    RUN_LOCALLY = "RunLocally"


class Outcome(StrEnum):
    """How a run ended (or that it is still going)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    TIMED_OUT = "TimedOut"
    LOST_LOCK = "LostLock"
    ABANDONED = "Abandoned"
    MISSED = "Missed"
    UNGUARDED = "Unguarded"

    @property
    def finished(self) -> bool:
        """Everything but Pending (a requested run nobody started yet) and Running: the run
        will not change any more."""
        return self not in (Outcome.PENDING, Outcome.RUNNING)

    @property
    def succeeded(self) -> bool:
        """Counts toward history.succeeded; every other finished outcome counts as failed."""
        return self is Outcome.SUCCEEDED


class ConditionStatus(StrEnum):
    """The status of a Kubernetes condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(StrEnum):
    """The condition types leasecron sets on a ScheduledJob."""

    VALID = "Valid"
    READY = "Ready"
    ON_SCHEDULE = "OnSchedule"
