"""The words leasecron writes where others read them, each defined once: the roles of its
Leases (label `leasecron.dev/role`) and the reasons a tick is skipped (the `reason` label of
`leasecron_skips_total`, a guard's `GuardResult.reason`, the logs). docs/design.md §5.1 lists
who writes each role; what a skip reason means is on its member below.

Both are `StrEnum`s: a member is the plain string wherever one is expected (labels, JSON,
comparisons with values read back from the API server). Owns the names only.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from leasecron.models.names import LABEL_COMPONENT, LABEL_ROLE


class Role(StrEnum):
    """`leasecron.dev/role` of a Lease leasecron writes: what protocol the Lease serves."""

    LEADER = "leader"
    """An election, one holder for as long as it renews: a single-owner job's Lease
    (`leasecron-job-<name>`, labelled `leasecron.dev/job`), the operator's (labelled
    `app.kubernetes.io/component=operator`), or an `Elector` used directly."""
    SHARD = "shard"
    """A tick lock, one claim per instant, its recorded tick the mark: a shard of a group's
    once-per-tick jobs (labelled `leasecron.dev/group`), a job's own shard, or a lock of no
    group (a plain guard's `leasecron-guard-<name>`, a `TickLock` used directly)."""
    GROUP = "group"
    """A group's record: its shard count, token ceiling and floor tick."""
    MEMBER = "member"
    """A replica's membership in its group, with the handlers it registered."""
    FLOORS = "floors"
    """The namespace's token floors: tombstones of deleted jobs' last tokens."""


LEGACY_JOB = "job"
"""The role earlier versions wrote on a job's election Lease (now `leader`)."""
LEGACY_GUARD = "guard"
"""The role earlier versions wrote on a guard's tick lock (now `shard`); on a `job=` guard's,
labelled `leasecron.dev/job`, the operator still reads its holder."""
LEGACY_OPERATOR = "operator"
"""The role earlier versions wrote on the operator's election Lease (now `leader`, with
`app.kubernetes.io/component=operator`)."""
LEGACY_ROLES: Mapping[str, Role] = MappingProxyType(
    {LEGACY_JOB: Role.LEADER, LEGACY_OPERATOR: Role.LEADER, LEGACY_GUARD: Role.SHARD}
)
"""Values earlier versions wrote, read as the role they are now; nothing writes them."""
COMPONENT_OPERATOR = "operator"
"""`app.kubernetes.io/component` of the operator's election Lease."""


def role_of(labels: Mapping[str, Any]) -> Role | None:
    """The role of a Lease with `labels` (a legacy value read as its current role); None
    for a Lease leasecron did not label."""
    value = str(labels.get(LABEL_ROLE) or "")
    if value in LEGACY_ROLES:
        return LEGACY_ROLES[value]
    try:
        return Role(value)
    except ValueError:
        return None


def is_operator_lease(labels: Mapping[str, Any]) -> bool:
    """Whether a Lease with `labels` is the operator's election Lease."""
    component, role = labels.get(LABEL_COMPONENT), labels.get(LABEL_ROLE)
    return component == COMPONENT_OPERATOR or role == LEGACY_OPERATOR


class SkipReason(StrEnum):
    """Why a replica did not run a tick (no run, or no run here)."""

    TAKEN = "taken"
    """The Lease records this tick or a later one: another replica has it."""
    LIVE_GRANT = "live_grant"
    """Another replica's grant on the Lease is live."""
    DEADLINE = "deadline"
    """The tick can no longer start before its startingDeadline (or start-by)."""
    CONFLICT = "conflict"
    """The claim's conditional write met another write."""
    EXISTS = "exists"
    """The Lease (or the tick's record) was there already."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The API server could not be reached."""
    UNCERTAIN = "uncertain"
    """The claim's reply and its read-back were lost: it may have landed."""
    ERROR = "error"
    """An unexpected failure (logged with its error)."""
    RETIRED = "retired"
    """The shard Lease's shard count was replaced."""
    OTHER_SHARD_COUNT = "other_shard_count"
    """The shard Lease belongs to another count than the group record's."""
    GROUP_RECORD_UNREADABLE = "group_record_unreadable"
    """The claim needs a higher token ceiling and the group record does not read."""
    BETTER_PLACED = "better_placed"
    """Another live replica registered every handler due at the instant: it claims it."""
    NOTHING_DUE = "nothing_due"
    """No job of the shard is due at the instant any more."""
    SUSPENDED = "suspended"
    """The job is suspended."""
    OVERLAP = "overlap"
    """The job's run of an earlier tick kept this one from starting (concurrencyPolicy)."""
    NO_HANDLER = "no_handler"
    """No handler is registered here for the job."""
    RECORD_FAILED = "record_failed"
    """The tick's run record could not be created, so it did not run."""
    NO_JOB = "no_job"
    """A `job=` guard's ScheduledJob does not exist."""


__all__ = [
    "COMPONENT_OPERATOR",
    "LEGACY_GUARD",
    "LEGACY_JOB",
    "LEGACY_OPERATOR",
    "LEGACY_ROLES",
    "Role",
    "SkipReason",
    "is_operator_lease",
    "role_of",
]
