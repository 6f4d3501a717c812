"""What the operator needs to know about one ScheduledJob, read once per spec version.

Owns `JobFacts` (a flat, immutable view of a valid job: bucket, schedule, group, handler,
deadlines, history limits, whether it has a Lease of its own), `Invalid` (the `Valid=False`
condition's reason and message for a job that is not: `RemovedField` for a stored object that
still carries a field that no longer means anything, such as `spec.coordination`), and
`read_job`, which turns a raw ScheduledJob into one or the other with
`leasecron.models.specs.validate_resource`. It never raises for a bad object: a broken
ScheduledJob must not stop the operator.

A once-per-tick job has no Lease of its own: its ticks are claimed on its group's shard
Lease, which `_world` finds from the group record. A single-owner job has its own Lease.

It does not look at status, Leases or JobRuns: `_jobstatus` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from leasecron.models.leases import parse_micro_time
from leasecron.models.names import job_lease_name
from leasecron.models.schedules import Schedule
from leasecron.models.specs import (
    REMOVED_FIELDS,
    Bucket,
    ConcurrencyPolicy,
    FieldProblem,
    RetrySpec,
    ScheduledJob,
    SpecError,
    validate_resource,
)
from leasecron.operator import _conditions as c

EVERY_REPLICA = "every-replica"
ONCE_PER_TICK = "once-per-tick"
SINGLE_OWNER = "single-owner"


@dataclass(frozen=True, kw_only=True)
class JobRef:
    """Identity of a ScheduledJob object (for owner references, Events and logs)."""

    namespace: str
    name: str
    uid: str
    generation: int
    created: datetime


@dataclass(frozen=True, kw_only=True)
class JobFacts:
    """A valid job, as the status logic uses it. `schedule` is None for single-owner jobs.
    `grant_fallback_s` is the duration assumed when the Lease whose holder runs the job (its
    own for single-owner, its shard Lease for once-per-tick) does not state a usable one."""

    ref: JobRef
    bucket: str
    schedule: Schedule | None
    group: str
    handler: str
    starting_deadline: timedelta
    suspend: bool
    history_succeeded: int
    history_failed: int
    grant_fallback_s: float
    retry: RetrySpec = field(default_factory=RetrySpec)
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.FORBID

    @property
    def job_lease(self) -> str | None:
        """The per-job Lease the operator creates and owns: single-owner jobs only."""
        return job_lease_name(self.ref.name) if self.bucket == SINGLE_OWNER else None

    @property
    def sharded(self) -> bool:
        """Whether its ticks are claimed on its group's shard Leases (once-per-tick)."""
        return self.bucket == ONCE_PER_TICK


@dataclass(frozen=True, kw_only=True)
class Invalid:
    """A job whose spec cannot be used: the `Valid=False` reason and message."""

    ref: JobRef
    reason: str
    message: str


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def job_ref(obj: Mapping[str, Any]) -> JobRef:
    """The identity fields of a raw ScheduledJob (never raises)."""
    metadata = _mapping(obj.get("metadata"))
    generation = metadata.get("generation")
    created_raw = metadata.get("creationTimestamp")
    created = datetime(1970, 1, 1, tzinfo=UTC)
    if isinstance(created_raw, str):
        with contextlib.suppress(ValueError):
            created = parse_micro_time(created_raw)
    return JobRef(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        generation=generation if isinstance(generation, int) else 0,
        created=created,
    )


def _invalid_reason(problems: tuple[FieldProblem, ...]) -> str:
    paths = [problem.path for problem in problems]
    if any(path.removeprefix("spec.") in REMOVED_FIELDS for path in paths):
        return c.REASON_REMOVED_FIELD
    if any(path == "spec.schedule" for path in paths):
        return c.REASON_INVALID_SCHEDULE
    if any(path == "spec.timeZone" for path in paths):
        return c.REASON_INVALID_TIME_ZONE
    return c.REASON_INVALID_SPEC


def _facts(ref: JobRef, job: ScheduledJob) -> JobFacts:
    spec = job.spec
    if spec.bucket is Bucket.ONCE_PER_TICK:
        fallback = spec.lock.at_most_for
    else:
        fallback = spec.election.lease_duration
    return JobFacts(
        ref=ref,
        bucket=str(spec.bucket),
        schedule=spec.parsed_schedule,
        group=spec.group,
        handler=job.handler_name,
        starting_deadline=spec.starting_deadline,
        suspend=spec.suspend,
        history_succeeded=spec.history.succeeded,
        history_failed=spec.history.failed,
        grant_fallback_s=fallback.total_seconds(),
        retry=spec.retry,
        concurrency_policy=spec.concurrency_policy,
    )


def read_job(obj: Mapping[str, Any]) -> JobFacts | Invalid:
    """The facts of a raw ScheduledJob, or why it is not valid. Never raises."""
    ref = job_ref(obj)
    try:
        return _facts(ref, validate_resource(obj))
    except SpecError as e:
        listed = "; ".join(str(problem) for problem in e.problems) or str(e)
        return Invalid(
            ref=ref,
            reason=_invalid_reason(e.problems),
            message=f"The spec is not valid: {listed}.",
        )
    except Exception as e:  # a bug in validation must not take the operator down
        return Invalid(
            ref=ref,
            reason=c.REASON_INVALID_SPEC,
            message=f"The spec could not be read: {type(e).__name__}: {e}.",
        )
