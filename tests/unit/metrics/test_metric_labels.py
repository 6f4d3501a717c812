"""The metrics' names and labels, which dashboards and alerts depend on: none carries a label
that Prometheus renames on scrape, a job is labelled the same way everywhere, the build is
identified, and the last-success gauge follows the jobs' status."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from leasecron import __version__
from leasecron import _metrics as shared
from leasecron.operator import _metrics as operator_metrics

# `job` and `instance` are set by Prometheus on every target, `namespace` by the usual
# Kubernetes service discovery relabelling: a metric's own label of that name is renamed to
# exported_<name> and queries silently miss it.
RESERVED = {"job", "namespace", "instance", "pod", "container"}


def _leasecron_metrics() -> Iterator[tuple[str, tuple[str, ...]]]:
    """(name, label names) of every leasecron metric."""
    for module in (shared, operator_metrics):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase) and value._name.startswith("leasecron_"):
                yield value._name, tuple(value._labelnames)
            elif isinstance(value, shared.CompactHistogram | shared.CompactCounter):
                yield value.name, value.labelnames


def test_no_metric_has_a_label_prometheus_renames_on_scrape() -> None:
    clashes = {
        name: sorted(RESERVED & set(labels))
        for name, labels in _leasecron_metrics()
        if RESERVED & set(labels)
    }
    assert clashes == {}


def test_every_per_job_metric_labels_the_job_as_job_namespace_and_scheduled_job() -> None:
    per_job = {
        name: labels[:2]
        for name, labels in _leasecron_metrics()
        if any("job" in label or "namespace" in label for label in labels) and "lease" not in labels
    }
    assert per_job and set(per_job.values()) == {("job_namespace", "scheduled_job")}, per_job
    assert {"leasecron_start_lag_seconds", "leasecron_run_duration_seconds"} <= set(per_job)


def test_a_compact_histogram_is_exposed_as_a_prometheus_client_histogram_is() -> None:
    """Same `_bucket` (cumulative, `le` as Go prints it), `_count` and `_sum` samples as
    prometheus_client's Histogram for the same observations (it has no `_created`)."""
    buckets = (0.005, 0.05, 1, 60)
    compact_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    compact = shared.CompactHistogram(
        "h_seconds", "help", ["a", "b"], buckets=buckets, registry=compact_registry
    )
    reference = Histogram(
        "h_seconds", "help", ["a", "b"], buckets=buckets, registry=reference_registry
    )
    for value in (0.005, 0.3, 1.0, 61.0, 0.0):
        compact.labels("x", "y").observe(value)
        reference.labels("x", "y").observe(value)
    compact.labels(a="x", b="z").observe(2.0)
    reference.labels(a="x", b="z").observe(2.0)

    def lines(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        return [line for line in text.splitlines() if "_created" not in line]

    assert lines(compact_registry) == lines(reference_registry)
    with pytest.raises(ValueError, match="takes labels"):
        compact.labels("only-one")


def test_a_compact_counter_is_exposed_as_a_prometheus_client_counter_is() -> None:
    """Same `_total` samples, HELP and TYPE as prometheus_client's Counter for the same
    increments (it has no `_created`); a negative increment is refused as there."""
    compact_registry, reference_registry = CollectorRegistry(), CollectorRegistry()
    compact = shared.CompactCounter("c", "help", ["a", "b"], registry=compact_registry)
    reference = Counter("c_total", "help", ["a", "b"], registry=reference_registry)
    for amount in (1, 2.5, 0):
        compact.labels("x", "y").inc(amount)
        reference.labels("x", "y").inc(amount)
    compact.labels(a="x", b="z").inc()
    reference.labels(a="x", b="z").inc()

    def lines(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        return [line for line in text.splitlines() if "_created" not in line]

    assert lines(compact_registry) == lines(reference_registry)
    assert compact_registry.get_sample_value("c_total", {"a": "x", "b": "y"}) == 3.5
    with pytest.raises(ValueError, match="only goes up"):
        compact.labels("x", "y").inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        compact.labels("only-one")


def test_build_info_carries_the_package_version() -> None:
    assert REGISTRY.get_sample_value("leasecron_build_info", {"version": __version__}) == 1.0


def _last_success(namespace: str, name: str) -> float | None:
    labels = {"job_namespace": namespace, "scheduled_job": name}
    return REGISTRY.get_sample_value("leasecron_last_success_timestamp_seconds", labels)


@pytest.fixture
def no_last_success() -> Iterator[None]:
    operator_metrics.record_last_success({})
    yield
    operator_metrics.record_last_success({})


@pytest.mark.usefixtures("no_last_success")
def test_last_success_follows_the_jobs_status_and_drops_jobs_that_are_gone() -> None:
    succeeded = {"status": {"lastSuccessfulTime": "2026-03-01T02:00:05Z"}}
    never = {"status": {"conditions": []}}
    operator_metrics.record_last_success(
        {("billing", "report"): succeeded, ("billing", "x"): never}
    )
    assert _last_success("billing", "report") == 1772330405.0
    assert _last_success("billing", "x") is None

    operator_metrics.record_last_success({("billing", "x"): never})
    assert _last_success("billing", "report") is None
