"""`leasecron.serve_metrics`: the one call that gives an application replica a /metrics
endpoint, here serving the counters of a run of a real once-per-tick job, labelled with the
job as `job_namespace` and `scheduled_job`."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

import leasecron

pytestmark = pytest.mark.integration


@pytest.fixture
def metrics_server() -> Iterator[leasecron.MetricsServer]:
    server = leasecron.serve_metrics(0, addr="127.0.0.1")
    yield server
    server.close()


def _scrape(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return response.read().decode().splitlines()


def test_serve_metrics_exposes_a_runs_counter_labelled_with_the_job(
    metrics_server: leasecron.MetricsServer, one_run: str, namespace: str
) -> None:
    lines = _scrape(metrics_server.port)
    runs = [
        line
        for line in lines
        if line.startswith("leasecron_runs_total{") and f'job_namespace="{namespace}"' in line
    ]
    assert runs == [
        f'leasecron_runs_total{{bucket="once-per-tick",job_namespace="{namespace}",'
        f'outcome="Succeeded",scheduled_job="report"}} 1.0'
    ]
    assert f'leasecron_build_info{{version="{leasecron.__version__}"}} 1.0' in lines
