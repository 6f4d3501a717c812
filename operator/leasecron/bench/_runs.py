"""One benchmark run's surroundings: cluster, namespace, replica group, log directory, and
how the result is printed (a human table, then with --json the JSON object as the last line).

Replica logs are removed after a successful run (unless $LEASECRON_BENCH_KEEP_LOGS is set)
and kept (their path printed) after a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecron.bench._clusters import bench_namespace, cluster, progress
from leasecron.bench._drivers import DRIVERS
from leasecron.bench._processes import ReplicaGroup


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    """What a benchmark needs while it runs."""

    kubeconfig: str
    namespace: str
    group: ReplicaGroup
    through: str
    workdir: Path

    def progress(self, message: str) -> None:
        progress(message)


@contextlib.contextmanager
def bench_run(*, prefix: str, through: str, kubeconfig: str | None = None) -> Iterator[BenchRun]:
    """Cluster ($KUBECONFIG or a local control plane), a fresh namespace and a replica group
    going through driver `through`; everything stopped and removed on exit."""
    if through not in DRIVERS:
        raise ValueError(f"unknown driver {through!r}; known: {', '.join(sorted(DRIVERS))}")
    workdir = Path(tempfile.mkdtemp(prefix=f"leasecron-bench-{prefix}-"))
    succeeded = False
    try:
        with (
            cluster(kubeconfig) as config,
            bench_namespace(config, prefix=f"bench-{prefix}") as namespace,
            ReplicaGroup(kubeconfig=config, workdir=workdir) as group,
        ):
            progress(f"namespace {namespace}, replica logs in {workdir}")
            yield BenchRun(
                kubeconfig=config,
                namespace=namespace,
                group=group,
                through=through,
                workdir=workdir,
            )
        succeeded = True
    finally:
        if succeeded and not os.environ.get("LEASECRON_BENCH_KEEP_LOGS"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"replica logs kept in {workdir}")


def print_result(figures: dict[str, Any], human: str, *, json_output: bool) -> None:
    """The table (unless empty); then, with `json_output`, the figures as the last line of
    stdout."""
    if human:
        print(human, flush=True)
    if json_output:
        print(json.dumps(figures), flush=True)
