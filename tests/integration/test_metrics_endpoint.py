"""`leasecron.serve_metrics`: the one call that gives an application replica a /metrics
endpoint, here serving the counters of a run of a real once-per-tick job, labelled with the
job as `job_namespace` and `scheduled_job`."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import leasecron
from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.runtime import Tuning
from leasecron.testing.handlers import run_tick_sync, scheduled_job

pytestmark = pytest.mark.integration
TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


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
    kube: Kube, namespace: str, metrics_server: leasecron.MetricsServer
) -> None:
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=Tuning(member_duration_s=3))

    def report(ctx: JobContext) -> None:
        ctx.assert_held()

    scheduler.register("report", report)
    result = run_tick_sync(scheduler, scheduled_job("report"), tick=TICK)
    assert result.outcome == "Succeeded"

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
