"""Prometheus metrics of the operator. The missed-run counter, the leadership gauge and the
API request counter are shared with the library (`leasecron._metrics`); the ones here exist
only in the operator. Names are part of the product: dashboards and alerts depend on them.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from leasecron._metrics import JOB_LABELS, LAST_SUCCESS, LEADER, LEADERSHIP_CHANGES, MISSED
from leasecron.operator import _conditions as c

__all__ = [
    "ABANDONED",
    "JOBS",
    "LAST_SUCCESS",
    "LEADER",
    "LEADERSHIP_CHANGES",
    "MISSED",
    "PRUNED",
    "RECONCILE_DURATION",
    "STATUS_PATCHES",
    "WRITES",
    "record_conditions",
    "record_last_success",
]

JOBS = Gauge(
    "leasecron_operator_jobs",
    "ScheduledJobs by condition type and status, as last written by this operator.",
    ["condition", "status"],
)
RECONCILE_DURATION = Histogram(
    "leasecron_operator_reconcile_duration_seconds",
    "Time to reconcile one job: compute its status, carry out the plan, patch the status.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
STATUS_PATCHES = Counter(
    "leasecron_operator_status_patches_total",
    "ScheduledJob status patches sent (only when the status changed).",
)
WRITES = Counter(
    "leasecron_operator_writes_total",
    "Writes this operator sent to the API server, by kind of object.",
    ["kind"],
)
ABANDONED = Counter(
    "leasecron_operator_abandoned_runs_total",
    "Running JobRuns marked Abandoned because their holder vanished.",
    list(JOB_LABELS),
)
PRUNED = Counter(
    "leasecron_operator_pruned_runs_total",
    "Finished JobRuns deleted to keep the configured history.",
    list(JOB_LABELS),
)


def record_conditions(statuses: Iterable[Mapping[str, Any]]) -> None:
    """Set JOBS from the statuses of all cached jobs."""
    tally: Tally[tuple[str, str]] = Tally()
    for status in statuses:
        for condition in c.conditions_by_type(status.get("conditions")).values():
            tally[(condition.type, condition.status)] += 1
    for kind in c.CONDITION_TYPES:
        for value in (c.TRUE, c.FALSE, c.UNKNOWN):
            JOBS.labels(condition=kind, status=value).set(tally[(kind, value)])


_last_success_series: set[tuple[str, str]] = set()


def record_last_success(jobs: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Set LAST_SUCCESS from the `status.lastSuccessfulTime` of the cached jobs, keyed by
    (namespace, name); drop the series of jobs that are gone or never succeeded."""
    current: set[tuple[str, str]] = set()
    for key, obj in jobs.items():
        stamp = (obj.get("status") or {}).get("lastSuccessfulTime")
        try:
            when = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
        except ValueError:
            when = None
        if when is None:
            continue
        LAST_SUCCESS.labels(*key).set(when.timestamp())
        current.add(key)
    for key in _last_success_series - current:
        LAST_SUCCESS.remove(*key)
    _last_success_series.clear()
    _last_success_series.update(current)
