"""Status conditions in the Kubernetes API conventions: one entry per `type`, with `status`
("True", "False" or "Unknown"), a CamelCase `reason`, a sentence `message`, the
`observedGeneration` it was computed for and a `lastTransitionTime` that moves only when
`status` changes.

Owns the `Condition` value, its round trip to the raw status dict, and `merge_conditions`,
which carries `lastTransitionTime` over from the previous status. The condition types the
operator writes (Valid, Ready, OnSchedule) and their reasons are named here. It does not decide
which status a condition has: `_jobstatus` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leasecron.models.names import format_tick

VALID = "Valid"
READY = "Ready"
ON_SCHEDULE = "OnSchedule"
CONDITION_TYPES = (VALID, READY, ON_SCHEDULE)

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"

# Reasons, CamelCase as the conventions ask.
REASON_VALID = "SpecValid"
REASON_INVALID_SCHEDULE = "InvalidSchedule"
REASON_INVALID_TIME_ZONE = "InvalidTimeZone"
REASON_INVALID_SPEC = "InvalidSpec"
REASON_REMOVED_FIELD = "RemovedField"
REASON_COVERED = "HandlerRegistered"
REASON_NO_REPLICAS = "NoReplicas"
REASON_HANDLER_NOT_REGISTERED = "HandlerNotRegistered"
REASON_SPEC_NOT_VALID = "SpecNotValid"
REASON_ON_SCHEDULE = "RunsStarted"
REASON_MISSED_RUN = "MissedRun"
REASON_SUSPENDED = "Suspended"
REASON_NOT_TRACKED = "NotTracked"
REASON_OWNED = "Owned"
REASON_NO_TICK_DUE = "NoTickDue"
REASON_AWAITING_OWNER = "AwaitingOwner"
REASON_AWAITING_RUN_RECORD = "AwaitingRunRecord"


@dataclass(frozen=True, kw_only=True)
class Condition:
    """One condition as the operator wants it; `last_transition_time` is filled in by
    `merge_conditions` (None means "now, unless the status did not change")."""

    type: str
    status: str
    reason: str
    message: str
    observed_generation: int | None = None
    last_transition_time: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The raw entry of `status.conditions`."""
        raw: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
        }
        if self.observed_generation is not None:
            raw["observedGeneration"] = self.observed_generation
        if self.last_transition_time is not None:
            raw["lastTransitionTime"] = self.last_transition_time
        return raw

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Condition | None:
        """The condition in a raw entry, or None when the entry has no usable type/status."""
        kind, status = raw.get("type"), raw.get("status")
        if not isinstance(kind, str) or not isinstance(status, str):
            return None
        generation = raw.get("observedGeneration")
        transition = raw.get("lastTransitionTime")
        return cls(
            type=kind,
            status=status,
            reason=str(raw.get("reason") or ""),
            message=str(raw.get("message") or ""),
            observed_generation=generation if isinstance(generation, int) else None,
            last_transition_time=transition if isinstance(transition, str) else None,
        )


def conditions_by_type(raw: object) -> dict[str, Condition]:
    """The conditions of a raw `status.conditions` list, keyed by type (the last one wins)."""
    found: dict[str, Condition] = {}
    if not isinstance(raw, list):
        return found
    for entry in raw:
        if isinstance(entry, Mapping):
            condition = Condition.from_dict(entry)
            if condition is not None:
                found[condition.type] = condition
    return found


def merge_conditions(
    previous: Mapping[str, Condition], desired: Iterable[Condition], *, now: datetime
) -> list[Condition]:
    """`desired` with lastTransitionTime set: kept from `previous` when the status is the
    same, `now` when the status changed or the type is new. Order follows `desired`."""
    merged: list[Condition] = []
    stamp = format_tick(now)
    for condition in desired:
        before = previous.get(condition.type)
        if before is not None and before.status == condition.status:
            transition = before.last_transition_time or stamp
        else:
            transition = stamp
        merged.append(
            Condition(
                type=condition.type,
                status=condition.status,
                reason=condition.reason,
                message=condition.message,
                observed_generation=condition.observed_generation,
                last_transition_time=transition,
            )
        )
    return merged


def find(conditions: Sequence[Condition], kind: str) -> Condition | None:
    """The condition of type `kind`, if present."""
    return next((c for c in conditions if c.type == kind), None)
