"""Prometheus metrics shared by the library and the operator, defined once here, and the
/metrics endpoint (`serve_metrics`).

Names and labels are part of the product: dashboards and alerts depend on them. No metric has
a label named `job`, `namespace` or `instance`: Prometheus sets `job` and `instance` on every
scraped series, and a Kubernetes scrape config adds `namespace` (the pod's), renaming the
target's own labels to `exported_*` on a clash. A job's labels are `job_namespace` and
`scheduled_job`; a Lease's are `lease_namespace` and `lease`.

Does not promise: that the endpoint is authenticated (bind it to a pod port, not a public one).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Counter, Gauge, start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from leasecron._version import __version__

JOB_LABELS = ("job_namespace", "scheduled_job")
LEASE_LABELS = ("lease_namespace", "lease")
_S = TypeVar("_S")

LAST_SUCCESS = Gauge(
    "leasecron_last_success_timestamp_seconds",
    "Unix time of the end of the job's last successful run (status.lastSuccessfulTime).",
    list(JOB_LABELS),
)


class _CompactMetric(Collector, Generic[_S]):
    """What `CompactHistogram` and `CompactCounter` share: their labels, one lock for all
    their series and the series by label values, made on first use by `_new_series`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.lock = threading.Lock()
        self._series: dict[tuple[str, ...], _S] = {}
        if registry is not None:
            registry.register(self)

    def _new_series(self) -> _S:
        raise NotImplementedError

    def labels(self, *values: object, **named: object) -> _S:
        if named:
            values = tuple(named[label] for label in self.labelnames)
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, not {values!r}")
        key = tuple(map(str, values))
        series = self._series.get(key)
        if series is None:
            with self.lock:
                series = self._series.setdefault(key, self._new_series())
        return series


class _Series:
    """One labelled series of a `CompactHistogram`: a count per bucket and the sum."""

    __slots__ = ("_owner", "counts", "total")

    def __init__(self, owner: CompactHistogram) -> None:
        self._owner = owner
        self.counts = [0] * len(owner.bounds)
        self.total = 0.0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self._owner.bounds, value)  # the first bound >= value
        with self._owner.lock:
            self.counts[index] += 1
            self.total += value


class CompactHistogram(_CompactMetric[_Series]):
    """A labelled histogram exposed as prometheus_client's `Histogram` is (`_bucket` with
    `le`, `_count`, `_sum`; no `_created`), with one lock for all its series and a plain list
    of counts per series: a job's series costs about 300 bytes where prometheus_client's
    costs a locked value per bucket (about 3.5 KB); for 10,000 jobs' two histograms, 6 MB
    instead of 70 MB per process (tracemalloc). `labels(...)` and `observe(v)` as in
    prometheus_client."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.bounds = (*sorted(float(b) for b in buckets), float("inf"))
        self._les = [floatToGoString(b) for b in self.bounds]  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry=registry)

    def _new_series(self) -> _Series:
        return _Series(self)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self.lock:
            rows = [(key, list(s.counts), s.total) for key, s in self._series.items()]
        for key, counts, total in rows:
            cumulative, buckets = 0, []
            for le, count in zip(self._les, counts, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric(list(key), buckets, total)
        yield family


class _Count:
    """One labelled series of a `CompactCounter`."""

    __slots__ = ("_owner", "value")

    def __init__(self, owner: CompactCounter) -> None:
        self._owner = owner
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up, not by {amount!r}")
        with self._owner.lock:
            self.value += amount


class CompactCounter(_CompactMetric[_Count]):
    """A labelled counter exposed as prometheus_client's `Counter` is (`<name>_total`; no
    `_created`), its series plain numbers under one lock: a job's series is made in about 2
    µs and holds about 220 bytes, where prometheus_client's `labels()` builds a metric
    object with its own lock per series (about 5 µs, 630 bytes; timeit and tracemalloc over
    10,000 series), and the per-job counters are made on the run and skip paths (a replica
    skips thousands of jobs' ticks on a large instant). `labels(...)` and `inc(amount)` as
    in prometheus_client; `name` without `_total`."""

    def _new_series(self) -> _Count:
        return _Count(self)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self.lock:
            rows = [(key, s.value) for key, s in self._series.items()]
        for key, value in rows:
            family.add_metric(list(key), value)
        yield family


RUNS = CompactCounter(
    "leasecron_runs",
    "Handler runs by outcome (Succeeded, Failed, LostLock, Unguarded, ...).",
    [*JOB_LABELS, "bucket", "outcome"],
)
SKIPS = CompactCounter(
    "leasecron_skips",
    "Ticks this replica did not run, by reason (taken, live_grant, conflict, exists, ...).",
    [*JOB_LABELS, "reason"],
)
MISSED = CompactCounter(
    "leasecron_missed_runs",
    "Ticks that no replica started before startingDeadline.",
    list(JOB_LABELS),
)
RUN_DURATION = CompactHistogram(
    "leasecron_run_duration_seconds",
    "Handler run time.",
    [*JOB_LABELS, "bucket"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
)
START_LAG = CompactHistogram(
    "leasecron_start_lag_seconds",
    "Time from the scheduled tick to the handler start.",
    [*JOB_LABELS, "bucket"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
)


def prepare_job(namespace: str, job: str, bucket: str) -> None:
    """Make a job's run metrics (series of the histograms) when the job is taken up, not on
    its first run's start path."""
    START_LAG.labels(namespace, job, bucket)
    RUN_DURATION.labels(namespace, job, bucket)


LEADER = Gauge(
    "leasecron_leader",
    "1 while this process holds the Lease as leader or single-owner, else 0.",
    list(LEASE_LABELS),
)
LEADERSHIP_CHANGES = Counter(
    "leasecron_leadership_transitions_total",
    "Times this process started or stopped leading a Lease.",
    [*LEASE_LABELS, "event"],
)
RECORD_BACKLOG = Gauge(
    "leasecron_record_backlog",
    "Run records (JobRuns) of this process waiting to be written (the API server could not be "
    "reached when the run ended).",
)
API_REQUESTS = Counter(
    "leasecron_api_requests_total",
    "Requests to the Kubernetes API by verb, resource and status code.",
    ["verb", "resource", "code"],
)
WATCH_EVENTS = Counter(
    "leasecron_watch_events_total",
    "Watch events received by resource and type (ADDED, MODIFIED, DELETED, BOOKMARK).",
    ["resource", "type"],
)
INJECTED_FAULTS = Counter(
    "leasecron_injected_faults_total",
    "Requests that a test fault plan (leasecron.testing.faults) failed, delayed or cut short.",
    ["verb", "resource", "action"],
)
IDENTITY_CONFLICTS = Counter(
    "leasecron_identity_conflicts_total",
    "Times this process found its member Lease written by another live process with the same "
    "identity (each process needs its own identity: the default gives one).",
    ["group"],
)
HOOK_ERRORS = Counter(
    "leasecron_hook_errors_total",
    "Run hook calls that raised, or events dropped because the hooks fell too far behind, by "
    "event (started, succeeded, failed, skipped) and reason (raised, dropped).",
    ["event", "reason"],
)
BUILD_INFO = Gauge(
    "leasecron_build_info",
    "Always 1; the version label is the leasecron version of this process.",
    ["version"],
)
BUILD_INFO.labels(version=__version__).set(1)


@dataclass(frozen=True)
class MetricsServer:
    """A running /metrics endpoint; `close()` stops it."""

    port: int
    _server: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(port: int = 9090, *, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve every leasecron metric (and the process's default ones) in the Prometheus text
    format on http://addr:port/metrics, from a daemon thread, and return the server; port 0
    picks a free one (see `.port`). One call per process, before or after the Scheduler
    starts:

        leasecron.serve_metrics(9090)
    """
    server, thread = start_http_server(port, addr=addr)
    return MetricsServer(port=int(server.server_address[1]), _server=server, _thread=thread)


def serve(port: int, *, addr: str = "0.0.0.0") -> None:
    """Expose /metrics on `port` (0 disables); what `leasecron operator --metrics-port` does."""
    if port:
        serve_metrics(port, addr=addr)
