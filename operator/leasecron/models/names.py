"""Names, labels and annotations that leasecron writes: one place, because users select on
them with kubectl and dashboards. Pure string functions; no I/O."""

from __future__ import annotations

import functools
import hashlib
import re
from datetime import UTC, datetime

GROUP = "leasecron.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SCHEDULEDJOB_PLURAL = "scheduledjobs"
JOBRUN_PLURAL = "jobruns"

LABEL_JOB = "leasecron.dev/job"
LABEL_GROUP = "leasecron.dev/group"
LABEL_ROLE = "leasecron.dev/role"  # on Leases: models.vocabulary.Role
LABEL_TRIGGER = "leasecron.dev/trigger"  # Manual | Backfill | Retry (on requested JobRuns)
TRIGGER_RETRY = "Retry"  # the trigger label of a run whose retry was handed over
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"  # "operator" on the operator's election Lease
MANAGED_BY = "leasecron"

ANNOTATION_TICK = "leasecron.dev/tick"  # RFC 3339 UTC of the highest tick claimed on a job Lease
ANNOTATION_CLAIMER = "leasecron.dev/claimer"  # who claimed that tick (kept when it is released)
ANNOTATION_HANDLERS = "leasecron.dev/handlers"  # JSON list of handler names, on member Leases
ANNOTATION_GUARD_HANDLERS = "leasecron.dev/guard-handlers"  # of those, the ones only guards run
ANNOTATION_INCARNATION = "leasecron.dev/incarnation"  # random per process, on member Leases

_MAX_NAME = 253
_INVALID = re.compile(r"[^a-z0-9.-]+")


def dns_name(raw: str, *, max_length: int = _MAX_NAME) -> str:
    """A DNS-1123 subdomain built from `raw`; too-long names keep a hash suffix, never collide."""
    name = _INVALID.sub("-", raw.lower()).strip("-.") or "x"
    if len(name) <= max_length:
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{name[: max_length - 11].rstrip('-.')}-{digest}"


def job_lease_name(job: str) -> str:
    """The Lease that coordinates one ScheduledJob (once-per-tick Lock, single-owner)."""
    return dns_name(f"leasecron-job-{job}")


def leader_lease_name(group: str) -> str:
    """The Lease of a group's scheduler leader (once-per-tick jobs with coordination: Leader)."""
    return dns_name(f"leasecron-leader-{group}")


def member_lease_name(group: str, identity: str) -> str:
    """The Lease one replica keeps alive to say it is a member of `group`."""
    return dns_name(f"leasecron-member-{group}-{identity}")


@functools.lru_cache(maxsize=1024)
def tick_stamp(tick: datetime) -> str:
    """`yyyymmddhhmmss` of a tick in UTC, as used in JobRun names (cached: every run of an
    instant names its JobRun with the same stamp)."""
    return tick.astimezone(UTC).strftime("%Y%m%d%H%M%S")


def jobrun_name(job: str, tick: datetime) -> str:
    """The JobRun name of a once-per-tick run: `<job>-<yyyymmddhhmmss>` (UTC)."""
    return dns_name(f"{job}-{tick_stamp(tick)}")


def term_jobrun_name(job: str, token: int) -> str:
    """The JobRun name of one single-owner ownership term: `<job>-term-<token>`."""
    return dns_name(f"{job}-term-{token}")


@functools.lru_cache(maxsize=1024)
def format_tick(tick: datetime) -> str:
    """RFC 3339 UTC with seconds, for the tick annotation and JobRun fields (cached: an
    instant is formatted for each of the thousands of jobs due at it)."""
    return tick.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_tick(text: str) -> datetime:
    """Inverse of format_tick; raises ValueError on anything else."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
