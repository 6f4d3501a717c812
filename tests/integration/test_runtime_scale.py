"""Correctness at scale against a real API server: thousands of default-spec once-per-tick
jobs due on one instant, 5 replicas (processes of the Scheduler, each with its own client and
event loop, as pods are: the `ticks --through runtime` benchmark's own driver), every tick
started exactly once and every JobRun written, none `Missed` or `LostLock`.

Only correctness is asserted; how fast the runs start is a benchmark figure
(`leasecron bench ticks --through runtime --jobs 10000 --ticks 1`, docs/benchmarks.md). On
a group's first instant every run's record is created before its start, so the shard grants
are held for as long as the replicas take to start all of their runs: a replica whose grant
renewals wait behind those starts (on its event loop, or behind the record writes in its
client's pool) loses its shards; the runs under them end `LostLock` and the ticks not started
yet are recorded `Missed`.
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
JOBS = 2000


def _bench_ticks(kubeconfig: Path, *, jobs: int, replicas: int) -> dict[str, Any]:
    """`leasecron bench ticks --through runtime ... --json` on the session's cluster."""
    args = ["--through", "runtime", "--replicas", str(replicas), "--jobs", str(jobs)]
    done = subprocess.run(
        [*LEASECRON, "bench", "ticks", *args, "--ticks", "1", "--json"],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def test_thousands_of_jobs_on_one_instant_start_once_each_and_are_all_recorded_succeeded(
    kubeconfig: Path,
) -> None:
    figures = _bench_ticks(kubeconfig, jobs=JOBS, replicas=5)

    assert (figures["runs"], figures["duplicates"], figures["missed"]) == (JOBS, 0, 0)
    assert figures["jobruns"] == {"Succeeded": JOBS}
