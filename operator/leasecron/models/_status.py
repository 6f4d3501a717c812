"""The status of a ScheduledJob (docs/design.md §3), as the operator writes it through the status
subresource.

Owns the shape of the status and the Kubernetes rule for replacing a condition. Which values
go in (missed runs, holders, readiness) is the operator's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from leasecron.models._enums import ConditionStatus, Outcome
from leasecron.models._fields import RecordModel, Tick, Timestamp

CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(RecordModel):
    """A condition in the Kubernetes convention (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316, description="Valid, Ready or OnSchedule.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
        description="Why, in CamelCase (for example MissedRun).",
    )
    message: str = Field(max_length=32768, description="Why, as a sentence for people.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation this condition was set for."
    )
    last_transition_time: Timestamp = Field(description="When status last changed.")


class LastRun(RecordModel):
    """The most recent run of the job, mirrored from its JobRun."""

    tick: Tick | None = Field(default=None, description="The tick it ran for (none for terms).")
    holder: str = Field(default="", description="The replica that ran it.")
    start: Timestamp | None = Field(default=None, description="When the handler started.")
    end: Timestamp | None = Field(default=None, description="When it finished.")
    outcome: Outcome | None = Field(default=None, description="How it ended, or Running.")
    fencing_token: int | None = Field(default=None, ge=0, description="The grant's token.")


class ScheduledJobStatus(RecordModel):
    """`status` of a ScheduledJob."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation last acted on."
    )
    conditions: tuple[Condition, ...] = Field(
        default=(), description="Valid, Ready and OnSchedule, one per type."
    )
    last_schedule_time: Timestamp | None = Field(
        default=None, description="The last tick a run started for."
    )
    next_schedule_time: Timestamp | None = Field(default=None, description="The next tick.")
    last_successful_time: Timestamp | None = Field(
        default=None, description="When the last successful run finished."
    )
    holder: str = Field(default="", description="Current Lease holder; empty when idle.")
    last_run: LastRun | None = Field(default=None, description="The most recent run.")
    missed_runs: int = Field(default=0, ge=0, description="Ticks no replica started in time.")
    replicas: int = Field(
        default=0, ge=0, description="Live replicas of the group that registered the handler."
    )

    @classmethod
    def from_resource(cls, obj: Mapping[str, Any]) -> ScheduledJobStatus:
        """The status of a ScheduledJob object; empty when it has none yet."""
        return cls.model_validate(obj.get("status") or {}, by_name=False)

    def condition(self, type_: str) -> Condition | None:
        """The condition of that type, if set."""
        return next((c for c in self.conditions if c.type == type_), None)
