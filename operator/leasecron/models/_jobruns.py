"""JobRun: one record per run (docs/design.md §4), and the dicts that create and finish it.

Facts fixed when the run starts (job, tick, holder, fencingToken, start) are in `spec`; how it
ends (outcome, end, message, duration) is in `status`. The JobRun CRD has no status
subresource on purpose: the create that claims a tick must carry `outcome: Running` in the
same write (a status subresource would drop it and cost a second write), and the finish is one
merge patch (`status_patch`). Does not send anything; the kube layer does.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from leasecron.models._enums import Outcome, Trigger
from leasecron.models._fields import Duration, RecordModel, Tick, Timestamp
from leasecron.models.names import (
    API_VERSION,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    dns_name,
    jobrun_name,
    term_jobrun_name,
)

JOBRUN_KIND = "JobRun"
MESSAGE_LIMIT = 1024
ATTEMPT_MESSAGE_LIMIT = 256
MAX_ATTEMPTS = 11


def job_label_value(job: str) -> str:
    """The `leasecron.dev/job` label value for a job: its name, hashed down to 63 characters
    when longer (label values are limited to 63)."""
    return dns_name(job, max_length=63)


class JobRunSpec(RecordModel):
    """What is known when the run starts."""

    job: str = Field(min_length=1, max_length=253, description="The ScheduledJob's name.")
    tick: Tick | None = Field(default=None, description="The tick run (none for terms).")
    holder: str = Field(default="", max_length=512, description="The replica's identity.")
    fencing_token: int | None = Field(default=None, ge=0, description="The grant's token.")
    start: Timestamp | None = Field(default=None, description="When the handler started.")
    trigger: Trigger | None = Field(
        default=None,
        description="Manual (`leasecron run`) or Backfill (`leasecron backfill`); unset (or "
        "Schedule) for a run of the schedule.",
    )
    requested_by: str | None = Field(
        default=None,
        max_length=512,
        description="Who asked for a Manual or Backfill run (the requesting user).",
    )


class Attempt(RecordModel):
    """One attempt of a run that is retried (spec.retry)."""

    start: Timestamp = Field(description="When the attempt started.")
    end: Timestamp | None = Field(default=None, description="When it ended.")
    outcome: Outcome = Field(default=Outcome.RUNNING, description="How it ended.")
    message: str = Field(default="", description="Error text, truncated.")

    @field_validator("message")
    @classmethod
    def _truncate(cls, value: str) -> str:
        return (
            value
            if len(value) <= ATTEMPT_MESSAGE_LIMIT
            else value[: ATTEMPT_MESSAGE_LIMIT - 3] + "..."
        )


class JobRunStatus(RecordModel):
    """How the run went; `outcome` is Running until it finishes."""

    outcome: Outcome = Field(default=Outcome.RUNNING, description="How the run ended.")
    end: Timestamp | None = Field(default=None, description="When it finished.")
    message: str = Field(
        default="", description=f"Error text, truncated to {MESSAGE_LIMIT} characters."
    )
    duration: Duration | None = Field(default=None, description="end - start, when both exist.")
    attempts: tuple[Attempt, ...] | None = Field(
        default=None,
        description=f"Each attempt of a retried run, in order (empty when it ran once); at "
        f"most {MAX_ATTEMPTS}.",
    )

    @field_validator("message")
    @classmethod
    def _truncate(cls, value: str) -> str:
        return value if len(value) <= MESSAGE_LIMIT else value[: MESSAGE_LIMIT - 3] + "..."

    @field_validator("attempts")
    @classmethod
    def _at_most(cls, value: tuple[Attempt, ...] | None) -> tuple[Attempt, ...] | None:
        if value is not None and len(value) > MAX_ATTEMPTS:
            raise ValueError(f"must list at most {MAX_ATTEMPTS} attempts")
        return value


class JobRun(BaseModel):
    """A JobRun object: its name and namespace, spec and status."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str | None = None
    spec: JobRunSpec
    status: JobRunStatus = JobRunStatus()

    @classmethod
    def for_tick(
        cls,
        *,
        job: str,
        tick: datetime,
        holder: str,
        start: datetime | None,
        fencing_token: int | None = None,
        namespace: str | None = None,
        outcome: Outcome = Outcome.RUNNING,
        message: str = "",
        name: str | None = None,
    ) -> JobRun:
        """The run of one tick, named `<job>-<yyyymmddhhmmss>` unless `name` is given."""
        spec = JobRunSpec(
            job=job, tick=tick, holder=holder, fencing_token=fencing_token, start=start
        )
        status = JobRunStatus(outcome=outcome, message=message)
        return cls(
            name=name or jobrun_name(job, tick), namespace=namespace, spec=spec, status=status
        )

    @classmethod
    def for_term(
        cls,
        *,
        job: str,
        fencing_token: int,
        holder: str,
        start: datetime,
        namespace: str | None = None,
    ) -> JobRun:
        """One ownership term of a single-owner job, named `<job>-term-<token>`."""
        spec = JobRunSpec(job=job, holder=holder, fencing_token=fencing_token, start=start)
        return cls(name=term_jobrun_name(job, fencing_token), namespace=namespace, spec=spec)

    def finish(
        self,
        *,
        outcome: Outcome,
        end: datetime,
        message: str = "",
        attempts: tuple[Attempt, ...] | None = None,
    ) -> JobRun:
        """A copy with the final outcome, end time, message, duration and (for a retried
        run) its attempts."""
        status = JobRunStatus(outcome=outcome, end=end, message=message, attempts=attempts or None)
        if self.spec.start is not None and status.end is not None:
            elapsed = max(status.end - self.spec.start, timedelta(0))
            status = status.model_copy(
                update={
                    "duration": timedelta(milliseconds=round(elapsed / timedelta(milliseconds=1)))
                }
            )
        return self.model_copy(update={"status": status})

    def retrying(self, *, attempts: tuple[Attempt, ...], message: str) -> JobRun:
        """A copy still Running, between two attempts of a retried run: the attempts so far
        and a message saying what comes next."""
        status = JobRunStatus(outcome=Outcome.RUNNING, message=message, attempts=attempts or None)
        return self.model_copy(update={"status": status})

    def to_resource(self, *, job_uid: str | None = None) -> dict[str, Any]:
        """The object to create. With `job_uid`, the ScheduledJob owns it, so deleting the job
        deletes its history."""
        metadata: dict[str, Any] = {
            "name": self.name,
            "labels": {LABEL_JOB: job_label_value(self.spec.job), LABEL_MANAGED_BY: MANAGED_BY},
        }
        if self.namespace:
            metadata["namespace"] = self.namespace
        if job_uid:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ScheduledJob",
                    "name": self.spec.job,
                    "uid": job_uid,
                    "controller": True,
                }
            ]
        return {
            "apiVersion": API_VERSION,
            "kind": JOBRUN_KIND,
            "metadata": metadata,
            "spec": self.spec.to_dict(),
            "status": self.status.to_dict(),
        }

    def status_patch(self) -> dict[str, Any]:
        """A JSON merge patch that writes this status (for example after `finish`)."""
        return {"status": self.status.to_dict()}

    @classmethod
    def from_resource(cls, obj: Mapping[str, Any]) -> JobRun:
        """Read a JobRun object as the API server returns it (pydantic ValidationError if it
        is malformed)."""
        metadata = obj.get("metadata") or {}
        return cls(
            name=metadata.get("name", ""),
            namespace=metadata.get("namespace") or None,
            spec=JobRunSpec.model_validate(obj.get("spec") or {}, by_name=False),
            status=JobRunStatus.model_validate(obj.get("status") or {}, by_name=False),
        )
