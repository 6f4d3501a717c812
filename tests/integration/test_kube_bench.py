"""`leasecron bench` end to end with tiny parameters: the JSON figures are complete and sane.

Correctness only (every tick run exactly once, a new leader every round); timings are
benchmark figures and are not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
LEASECRON = [sys.executable, "-c", "from leasecron.cli import main; main()"]


def bench(kubeconfig: Path, *args: str, timeout: float = 240.0) -> dict[str, Any]:
    """Run `leasecron bench ARGS --json` against the session's cluster; its last line."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run(
        [*LEASECRON, "bench", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def test_bench_handover_reports_a_new_leader_in_every_round(kubeconfig: Path) -> None:
    figures = bench(kubeconfig, "handover", "--rounds", "2", "--replicas", "2")

    assert figures["rounds"] == 2
    assert len(figures["samples_s"]) == 2
    assert 0 < figures["p50_s"] <= figures["max_s"]


def test_bench_failover_reports_its_lease_duration_and_every_round(kubeconfig: Path) -> None:
    figures = bench(
        kubeconfig, "failover", "--rounds", "1", "--replicas", "2", "--lease-duration", "2"
    )

    assert figures["rounds"] == 1
    assert figures["lease_duration_s"] == 2.0
    assert 0 < figures["p50_s"] <= figures["max_s"]


def test_bench_ticks_runs_every_tick_of_every_job_exactly_once(kubeconfig: Path) -> None:
    figures = bench(kubeconfig, "ticks", "--replicas", "2", "--jobs", "2", "--ticks", "3")

    expected_keys = {
        "replicas",
        "jobs",
        "ticks",
        "runs",
        "duplicates",
        "missed",
        "start_lag_p50_ms",
        "start_lag_p99_ms",
        "writes_per_run",
        "standby_requests_per_s",
    }
    assert expected_keys <= figures.keys()
    assert (figures["replicas"], figures["jobs"], figures["ticks"]) == (2, 2, 3)
    assert figures["runs"] == 2 * 3
    assert (figures["duplicates"], figures["missed"]) == (0, 0)
    assert sum(figures["runs_per_replica"].values()) == figures["runs"]
    assert figures["writes_per_run"] >= 1.0


def test_bench_ticks_through_the_runtime_runs_default_spec_jobs_once_and_records_each(
    kubeconfig: Path,
) -> None:
    figures = bench(
        kubeconfig,
        *("ticks", "--through", "runtime", "--replicas", "2", "--jobs", "3", "--ticks", "2"),
    )

    assert figures["through"] == "runtime"
    assert figures["runs"] == 3 * 2
    assert (figures["duplicates"], figures["missed"], figures["past_deadline"]) == (0, 0, 0)
    assert figures["jobruns"] == {"Succeeded": 6}
    assert figures["jobruns_written_s"] is not None
    assert figures["rss_mb_max"] > 0
