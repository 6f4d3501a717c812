"""ScheduledJob as a value: the spec a user writes (docs/design.md §3), its validation, the names of
the enums shared with JobRun records and status.

Owns every rule about what a valid ScheduledJob is: the ones the CRD schema and its CEL rules
enforce (re-checked here, so `leasecron validate` and the operator agree with the API server)
and the ones the API server cannot check (cron syntax, IANA zone names, sane bounds). All
problems are collected and raised together as one SpecError. Does not talk to the API server.

Field names are the user-facing camelCase names on the wire and snake_case in Python.
`JobRun`, `ScheduledJobStatus` and friends live in private modules and are re-exported here.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from datetime import timedelta
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from leasecron.models import _zones
from leasecron.models._enums import (
    Bucket,
    CatchUpPolicy,
    ConcurrencyPolicy,
    ConditionStatus,
    ConditionType,
    Outcome,
    StoreUnavailablePolicy,
    Trigger,
)
from leasecron.models._fields import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_VALUE_PATTERN,
    Duration,
    ResourceModel,
    show,
)
from leasecron.models._jobruns import Attempt, JobRun, JobRunSpec, JobRunStatus, job_label_value
from leasecron.models._parts import (
    SECOND,
    CatchUpSpec,
    ElectionSpec,
    HistorySpec,
    LockSpec,
    RetrySpec,
    within,
)
from leasecron.models._problems import MISSING, FieldProblem, SpecError, problems_from
from leasecron.models._status import Condition, LastRun, ScheduledJobStatus
from leasecron.models.names import API_VERSION
from leasecron.models.schedules import Schedule, ScheduleError

__all__ = [
    "MISSING",
    "Attempt",
    "Bucket",
    "CatchUpPolicy",
    "CatchUpSpec",
    "ConcurrencyPolicy",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "ElectionSpec",
    "FieldProblem",
    "HistorySpec",
    "JobRun",
    "JobRunSpec",
    "JobRunStatus",
    "LastRun",
    "LockSpec",
    "Outcome",
    "RetrySpec",
    "ScheduledJob",
    "ScheduledJobSpec",
    "ScheduledJobStatus",
    "SpecError",
    "StoreUnavailablePolicy",
    "Trigger",
    "job_label_value",
    "validate_resource",
]

SCHEDULEDJOB_KIND = "ScheduledJob"
MAX_DEADLINE = timedelta(days=7)
MAX_JITTER = timedelta(hours=24)
MAX_TIMEOUT = timedelta(days=7)
_NOT_FOR_OWNERS = (
    "must not be set when spec.bucket is single-owner (its handler runs for a whole term)"
)
_GROUP = re.compile(LABEL_VALUE_PATTERN)
_HANDLER = re.compile(r"^\S+$")
_SCHEDULE_REQUIRED = "is required unless spec.bucket is single-owner"
_SCHEDULE_FORBIDDEN = "must not be set when spec.bucket is single-owner (it runs continuously)"
ONE_SHARD_HINT = (
    "a group that wants one replica to run all its jobs records one shard: "
    "`leasecron shards GROUP --count 1`"
)
REMOVED_FIELDS: Mapping[str, str] = {
    "coordination": "was removed: every once-per-tick job is claimed through its group's "
    f"shard Leases; delete the field ({ONE_SHARD_HINT})",
}
"""Fields of `spec` that earlier versions had and that no longer mean anything: refused
with a message that says what to do instead, never silently ignored or reinterpreted."""
KEPT_VALUES: Mapping[str, str] = {"coordination": "Lock"}
"""The one value of a removed field that still means exactly what it meant (`Lock`, the old
default: each tick claimed by one replica, which is what the claim engine does for every
once-per-tick job). Accepted and ignored, so that objects stored with the old default keep
running; `leasecron validate` warns that it can be deleted."""


class ScheduledJobSpec(ResourceModel):
    """`spec` of a ScheduledJob. Built only from valid input; see validate_resource."""

    bucket: Bucket = Field(description="every-replica, once-per-tick or single-owner.")
    schedule: str | None = Field(
        default=None,
        max_length=256,
        validate_default=True,
        description="Cron (5 fields, or 6 with seconds first), @hourly..@yearly, or "
        "'@every <duration>'. Required unless bucket is single-owner, where it is not allowed.",
    )
    time_zone: str = Field(
        default="UTC", max_length=64, description="IANA time zone the schedule is read in."
    )
    group: str = Field(
        default="default",
        min_length=1,
        max_length=63,
        description="Which replicas take part: the library's group name (a label value).",
    )
    handler: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="Handler name registered in code; defaults to metadata.name.",
    )
    lock: LockSpec = Field(default_factory=LockSpec, description="Claim timings (once-per-tick).")
    election: ElectionSpec = Field(
        default_factory=ElectionSpec,
        description="Leader election timings (single-owner).",
    )
    starting_deadline: Duration = Field(
        default=timedelta(seconds=60),
        description="A tick not started by this long after it is missed. 1s to 7 days.",
    )
    catch_up: CatchUpSpec = Field(
        default_factory=CatchUpSpec,
        description="What runs for ticks missed while no replica could.",
    )
    on_store_unavailable: StoreUnavailablePolicy = Field(
        default=StoreUnavailablePolicy.SKIP,
        description="Skip (fail closed) or RunLocally (fail open: every replica runs, "
        "recorded as Unguarded) when the API server cannot be reached.",
    )
    jitter: Duration = Field(
        default=timedelta(0),
        description="Random delay spread after the tick; less than startingDeadline.",
    )
    timeout: Duration | None = Field(
        default=None,
        description="How long a run may take: the handler is told to stop, then cancelled, "
        "and the run ends TimedOut (alarmed like a failure). Unset: no limit. 1s to 7 days; "
        "independent of lock.atMostFor, which bounds the claim. Not for single-owner.",
    )
    retry: RetrySpec = Field(
        default_factory=RetrySpec,
        description="Retries of a failed or timed-out run within its tick. Not for single-owner.",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default=ConcurrencyPolicy.FORBID,
        description="A tick due while the run of an earlier tick still goes: Forbid (skip "
        "it), Replace (stop the running run, then start the new tick) or Allow (both run, "
        "each with its own token). Only Forbid for single-owner.",
    )
    suspend: StrictBool = Field(default=False, description="Stop starting new runs.")
    history: HistorySpec = Field(
        default_factory=HistorySpec, description="Finished JobRuns kept per outcome."
    )

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None, info: ValidationInfo) -> str | None:
        bucket = info.data.get("bucket")
        if value is None:
            if bucket is not None and bucket is not Bucket.SINGLE_OWNER:
                raise ValueError(_SCHEDULE_REQUIRED)
            return None
        if bucket is Bucket.SINGLE_OWNER:
            raise ValueError(_SCHEDULE_FORBIDDEN)
        try:
            _parse_schedule(value, "UTC")  # parsed once per expression
        except ScheduleError as e:
            raise ValueError(e.reason) from e
        return value

    @field_validator("time_zone")
    @classmethod
    def _time_zone(cls, value: str) -> str:
        _zones.load_zone(value)
        return value

    @field_validator("group")
    @classmethod
    def _group(cls, value: str) -> str:
        if not _GROUP.fullmatch(value):
            raise ValueError(
                "must be a label value: letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("handler")
    @classmethod
    def _handler(cls, value: str | None) -> str | None:
        if value is not None and not _HANDLER.fullmatch(value):
            raise ValueError("must not contain whitespace")
        return value

    @field_validator("starting_deadline")
    @classmethod
    def _starting_deadline(cls, value: timedelta) -> timedelta:
        return within(value, low=SECOND, high=MAX_DEADLINE)

    @field_validator("jitter")
    @classmethod
    def _jitter(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        deadline = info.data.get("starting_deadline")
        if deadline is not None and value >= deadline:
            raise ValueError(f"must be less than spec.startingDeadline ({show(deadline)})")
        return within(value, low=timedelta(0), high=MAX_JITTER)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: timedelta | None, info: ValidationInfo) -> timedelta | None:
        if value is None:
            return None
        if info.data.get("bucket") is Bucket.SINGLE_OWNER:
            raise ValueError(_NOT_FOR_OWNERS)
        return within(value, low=SECOND, high=MAX_TIMEOUT)

    @field_validator("retry")
    @classmethod
    def _retry(cls, value: RetrySpec, info: ValidationInfo) -> RetrySpec:
        if value.limit and info.data.get("bucket") is Bucket.SINGLE_OWNER:
            raise ValueError(
                "limit must be 0 when spec.bucket is single-owner (an owner that fails "
                "contends again by itself)"
            )
        return value

    @field_validator("concurrency_policy")
    @classmethod
    def _concurrency_policy(
        cls, value: ConcurrencyPolicy, info: ValidationInfo
    ) -> ConcurrencyPolicy:
        if value is not ConcurrencyPolicy.FORBID and info.data.get("bucket") is Bucket.SINGLE_OWNER:
            raise ValueError(
                "must be Forbid when spec.bucket is single-owner (one owner at a time)"
            )
        return value

    @property
    def parsed_schedule(self) -> Schedule | None:
        """The schedule read in timeZone; None for single-owner jobs. Parsed once per
        distinct (schedule, timeZone) and shared: a Schedule is immutable."""
        if self.schedule is None:
            return None
        return _parse_schedule(self.schedule, self.time_zone)


@lru_cache(maxsize=4096)
def _parse_schedule(expression: str, time_zone: str) -> Schedule:
    return Schedule.parse(expression, time_zone=time_zone)


class ScheduledJob(BaseModel):
    """A validated ScheduledJob: identity from metadata plus its spec."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    spec: ScheduledJobSpec

    @property
    def handler_name(self) -> str:
        """The handler that runs this job: spec.handler, or metadata.name when unset."""
        return self.spec.handler or self.name

    @classmethod
    def from_resource(cls, obj: Mapping[str, Any]) -> ScheduledJob:
        """Read a ScheduledJob as the API server returns it; SpecError lists all problems."""
        return validate_resource(obj)

    def to_resource(self) -> dict[str, Any]:
        """The object to create: apiVersion, kind, metadata (name, namespace) and full spec."""
        metadata: dict[str, Any] = {"name": self.name}
        if self.namespace:
            metadata["namespace"] = self.namespace
        return {
            "apiVersion": API_VERSION,
            "kind": SCHEDULEDJOB_KIND,
            "metadata": metadata,
            "spec": self.spec.to_dict(),
        }


def validate_resource(obj: Mapping[str, Any]) -> ScheduledJob:
    """Validate a ScheduledJob given as a dict (from YAML or the API server).

    Checks apiVersion, kind, metadata and every spec rule; raises SpecError listing all the
    problems found, each with its field path and offending value.
    """
    if not isinstance(obj, Mapping):
        raise SpecError([FieldProblem(path="(document)", value=obj, message="must be a mapping")])
    problems = _header_problems(obj)
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    spec_data = obj.get("spec", MISSING)
    spec: ScheduledJobSpec | None = None
    if spec_data is MISSING:
        problems.append(FieldProblem(path="spec", value=MISSING, message="is required"))
    else:
        removed, spec_data = _removed_fields(spec_data)
        problems.extend(removed)
        try:
            spec = ScheduledJobSpec.model_validate(spec_data, by_name=False)
        except ValidationError as e:
            problems.extend(problems_from(e, prefix="spec"))
    if problems or spec is None:
        raise SpecError(problems)
    return ScheduledJob(
        name=metadata["name"],
        namespace=metadata.get("namespace") or None,
        uid=metadata.get("uid") or None,
        generation=metadata.get("generation"),
        spec=_shared(spec, parts=_PARTS),
    )


_Model = TypeVar("_Model", bound=BaseModel)
_SHARED: weakref.WeakValueDictionary[tuple[object, ...], BaseModel] = weakref.WeakValueDictionary()
"""Each distinct spec, and spec part, that a live job holds, by its type and values."""
_PARTS = ("lock", "election", "catch_up", "retry", "history")


def _shared(model: _Model, *, parts: tuple[str, ...] = ()) -> _Model:
    """An equal model validated before while one is alive (models are frozen, so one copy
    serves every job: 10,000 jobs with default specs hold one spec), else `model`, made the
    shared one, holding the shared copies of its `parts`."""
    key = (type(model), *model.__dict__.values())
    try:
        found = _SHARED.get(key)
    except TypeError:  # a value that cannot be hashed: not shared
        return model
    if found is not None:
        return found  # type: ignore[return-value]
    if parts:  # keyed by the copy's values, so the entry holds the shared parts only
        model = model.model_copy(update={name: _shared(getattr(model, name)) for name in parts})
        key = (type(model), *model.__dict__.values())
    _SHARED[key] = model
    return model


def _removed_fields(spec_data: object) -> tuple[list[FieldProblem], object]:
    """The problems of the removed fields `spec_data` carries, and the spec without them (so
    the rest is still checked and not reported as unknown fields)."""
    if not isinstance(spec_data, Mapping):
        return [], spec_data
    problems = [
        FieldProblem(path=f"spec.{key}", value=spec_data[key], message=message)
        for key, message in REMOVED_FIELDS.items()
        if key in spec_data and spec_data[key] != KEPT_VALUES.get(key)
    ]
    return problems, {k: v for k, v in spec_data.items() if k not in REMOVED_FIELDS}


def _header_problems(obj: Mapping[str, Any]) -> list[FieldProblem]:
    problems: list[FieldProblem] = []
    for key, expected in (("apiVersion", API_VERSION), ("kind", SCHEDULEDJOB_KIND)):
        value = obj.get(key, MISSING)
        if value != expected:
            problems.append(FieldProblem(path=key, value=value, message=f"must be {expected}"))
    metadata = obj.get("metadata", MISSING)
    if not isinstance(metadata, Mapping):
        message = "is required" if metadata is MISSING else "must be a mapping"
        return [*problems, FieldProblem(path="metadata", value=metadata, message=message)]
    checks = (
        ("name", DNS_SUBDOMAIN_PATTERN, 253, True),
        ("namespace", DNS_LABEL_PATTERN, 63, False),
    )
    for key, pattern, longest, required in checks:
        value = metadata.get(key, MISSING)
        if value is MISSING:
            if required:
                problems.append(
                    FieldProblem(path=f"metadata.{key}", value=value, message="is required")
                )
        elif not isinstance(value, str) or len(value) > longest or not re.fullmatch(pattern, value):
            problems.append(
                FieldProblem(
                    path=f"metadata.{key}",
                    value=value,
                    message=f"must be a DNS name: lower-case letters, digits and '-', "
                    f"at most {longest} characters",
                )
            )
    generation = metadata.get("generation")
    if generation is not None and (not isinstance(generation, int) or isinstance(generation, bool)):
        problems.append(
            FieldProblem(path="metadata.generation", value=generation, message="must be an integer")
        )
    return problems
