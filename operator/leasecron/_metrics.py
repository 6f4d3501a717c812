"""Prometheus metrics shared by the library and the operator, defined once here.

Names are part of the product: dashboards and alerts depend on them.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RUNS = Counter(
    "leasecron_runs_total",
    "Handler runs by outcome (Succeeded, Failed, LostLock, Unguarded, ...).",
    ["namespace", "job", "bucket", "outcome"],
)
SKIPS = Counter(
    "leasecron_skips_total",
    "Ticks this replica did not run, by reason (taken, live_grant, conflict, exists, ...).",
    ["namespace", "job", "reason"],
)
MISSED = Counter(
    "leasecron_missed_runs_total",
    "Ticks that no replica started before startingDeadline.",
    ["namespace", "job"],
)
RUN_DURATION = Histogram(
    "leasecron_run_duration_seconds",
    "Handler run time.",
    ["namespace", "job", "bucket"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
)
START_LAG = Histogram(
    "leasecron_start_lag_seconds",
    "Time from the scheduled tick to the handler start.",
    ["namespace", "job", "bucket"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
)
LEADER = Gauge(
    "leasecron_leader",
    "1 while this process holds the Lease as leader or single-owner, else 0.",
    ["namespace", "lease"],
)
LEADERSHIP_CHANGES = Counter(
    "leasecron_leadership_transitions_total",
    "Times this process started or stopped leading a Lease.",
    ["namespace", "lease", "event"],
)
RECORD_BACKLOG = Gauge(
    "leasecron_record_backlog",
    "Run records (JobRuns) waiting to be written because the API server could not be reached.",
    ["namespace"],
)
API_REQUESTS = Counter(
    "leasecron_api_requests_total",
    "Requests to the Kubernetes API by verb, resource and status code.",
    ["verb", "resource", "code"],
)
INJECTED_FAULTS = Counter(
    "leasecron_injected_faults_total",
    "Requests that a test fault plan (leasecron.testing.faults) failed, delayed or cut short.",
    ["verb", "resource", "action"],
)


def serve(port: int, *, addr: str = "0.0.0.0") -> None:
    """Expose /metrics on `port` (0 disables)."""
    if port:
        start_http_server(port, addr=addr)
