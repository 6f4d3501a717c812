"""The demo's three ScheduledJobs, one per bucket, as manifests built in code so that the demo
works from an installed package. They are the same as `examples/jobs/*.yaml` (a unit test
keeps them equal); only the namespace is filled in by `scheduled_jobs`.

Owns the manifests and the few facts the driver derives from them (job names, schedules,
the single-owner lease duration). Without `spec.handler`, each job's handler is its name:
the example app registers `refresh-cache`, `send-invoices` and `queue-poller`. Does not
apply anything.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from leasecron.models.durations import parse_duration
from leasecron.models.names import API_VERSION
from leasecron.models.schedules import Schedule

GROUP = "example-app"
EVERY_REPLICA_JOB = "refresh-cache"
ONCE_PER_TICK_JOB = "send-invoices"
SINGLE_OWNER_JOB = "queue-poller"

_SPECS: dict[str, dict[str, Any]] = {
    EVERY_REPLICA_JOB: {
        "bucket": "every-replica",
        "schedule": "@every 5s",
        "group": GROUP,
    },
    ONCE_PER_TICK_JOB: {
        "bucket": "once-per-tick",
        "schedule": "@every 2s",
        "group": GROUP,
        "lock": {"atMostFor": "30s", "atLeastFor": "0s", "keepAlive": True},
        "startingDeadline": "2s",
        "catchUp": {"policy": "Latest"},
        "history": {"succeeded": 5, "failed": 5},
    },
    SINGLE_OWNER_JOB: {
        "bucket": "single-owner",
        "group": GROUP,
        "election": {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"},
    },
}


def scheduled_jobs(*, namespace: str | None = None, group: str = GROUP) -> list[dict[str, Any]]:
    """The three ScheduledJob manifests (a fresh copy), in `namespace` when given."""
    manifests = []
    for name, spec in _SPECS.items():
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        manifests.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ScheduledJob",
                "metadata": metadata,
                "spec": {**copy.deepcopy(spec), "group": group},
            }
        )
    return manifests


def schedule_of(job: str) -> Schedule:
    """The parsed schedule of a tick-driven demo job."""
    expression = _SPECS[job].get("schedule")
    if not isinstance(expression, str):
        raise ValueError(f"{job} has no schedule")
    return Schedule.parse(expression)


def tick_interval(job: str) -> float:
    """Seconds between two ticks of an `@every` demo job."""
    every = schedule_of(job).every
    if every is None:
        raise ValueError(f"{job} is not an @every schedule")
    return every.total_seconds()


def lease_duration(job: str = SINGLE_OWNER_JOB) -> timedelta:
    """The election leaseDuration of the single-owner job (the failover bound)."""
    return parse_duration(str(_SPECS[job]["election"]["leaseDuration"]))
