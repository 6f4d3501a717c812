"""The metrics' names and labels, which dashboards and alerts depend on: none carries a label
that Prometheus renames on scrape, a job is labelled the same way everywhere, the build is
identified, and the last-success gauge follows the jobs' status."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from leasecron import __version__
from leasecron import _metrics as shared
from leasecron.operator import _metrics as operator_metrics

# `job` and `instance` are set by Prometheus on every target, `namespace` by the usual
# Kubernetes service discovery relabelling: a metric's own label of that name is renamed to
# exported_<name> and queries silently miss it.
RESERVED = {"job", "namespace", "instance", "pod", "container"}


def _leasecron_metrics() -> Iterator[MetricWrapperBase]:
    for module in (shared, operator_metrics):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase) and value._name.startswith("leasecron_"):
                yield value


def test_no_metric_has_a_label_prometheus_renames_on_scrape() -> None:
    clashes = {
        metric._name: sorted(RESERVED & set(metric._labelnames))
        for metric in _leasecron_metrics()
        if RESERVED & set(metric._labelnames)
    }
    assert clashes == {}


def test_every_per_job_metric_labels_the_job_as_job_namespace_and_scheduled_job() -> None:
    per_job = {
        metric._name: metric._labelnames[:2]
        for metric in _leasecron_metrics()
        if any("job" in label or "namespace" in label for label in metric._labelnames)
        and "lease" not in metric._labelnames
    }
    assert per_job and set(per_job.values()) == {("job_namespace", "scheduled_job")}, per_job


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
