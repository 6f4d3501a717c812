"""The objects the operator creates or patches, built as plain dicts: the labels and owner of
the job's Lease (owned by its ScheduledJob, so garbage collection removes it with the job; the
lock layer builds the Lease), `Missed` and `Abandoned` JobRuns, and core/v1 Warning Events
about a ScheduledJob.

Pure: no I/O. Names and labels come from `models.names`; JobRun bodies from
`models.specs.JobRun`, so the operator writes exactly what replicas write.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from leasecron.models.names import (
    API_VERSION,
    LABEL_GROUP,
    LABEL_JOB,
    dns_name,
    format_tick,
)
from leasecron.models.specs import JobRun, Outcome, job_label_value
from leasecron.operator._facts import JobFacts, JobRef

COMPONENT = "leasecron-operator"
REPORTING_COMPONENT = "leasecron.dev/operator"
SCHEDULEDJOB_KIND = "ScheduledJob"


def owner_reference(ref: JobRef) -> dict[str, Any]:
    """An ownerReference to the ScheduledJob: its dependents go when it goes."""
    return {
        "apiVersion": API_VERSION,
        "kind": SCHEDULEDJOB_KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
    }


def job_lease_labels(facts: JobFacts) -> dict[str, str]:
    """The labels of a job's own (election) Lease, beside the lock layer's role and manager."""
    return {LABEL_JOB: job_label_value(facts.ref.name), LABEL_GROUP: facts.group}


def missed_run(facts: JobFacts, *, tick: datetime, now: datetime, message: str) -> dict[str, Any]:
    """The `Missed` JobRun of `tick` (same name a replica would have used for the tick)."""
    run = JobRun.for_tick(
        job=facts.ref.name,
        tick=tick,
        holder="",
        start=None,
        namespace=facts.ref.namespace,
        outcome=Outcome.MISSED,
        message=message,
    ).finish(outcome=Outcome.MISSED, end=now, message=message)
    return run.to_resource(job_uid=facts.ref.uid)


def abandoned_patch(
    obj: Mapping[str, Any], *, now: datetime, message: str
) -> dict[str, Any] | None:
    """A conditional merge patch that finishes a Running JobRun as `Abandoned`, or None
    when the object cannot be read as a JobRun."""
    try:
        run = JobRun.from_resource(obj)
    except ValueError:
        return None
    patch = run.finish(outcome=Outcome.ABANDONED, end=now, message=message).status_patch()
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    if version:
        patch["metadata"] = {"resourceVersion": version}
    return patch


def warning_event(
    ref: JobRef, *, reason: str, message: str, now: datetime, reporter: str
) -> dict[str, Any]:
    """A core/v1 Warning Event about the ScheduledJob `ref`."""
    stamp = format_tick(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": dns_name(f"{ref.name}.{secrets.token_hex(8)}"),
            "namespace": ref.namespace,
            "labels": {LABEL_JOB: job_label_value(ref.name)},
        },
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": SCHEDULEDJOB_KIND,
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": reporter[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
