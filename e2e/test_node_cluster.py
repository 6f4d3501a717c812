"""`leasecron.testing.NodeCluster` itself: it starts a node that runs a pod and stops leaving
nothing behind (no process in its namespaces or cgroups, no cgroup directory, no mount, no
changed sysctl, no work directory), and where it cannot run it says what is missing."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from leasecron.testing import (
    ControlPlaneError,
    NodeCluster,
    _node,
    missing_node_prerequisites,
    poll,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
POD = """
apiVersion: v1
kind: Pod
metadata: {name: pause}
spec:
  containers:
    - {name: pause, image: localhost/leasecron/pause:1.0, imagePullPolicy: Never}
"""


def host_state() -> dict[str, object]:
    return {
        "sysctls": {k: Path(f"/proc/sys/{k}").read_text() for k in SYSCTLS},
        "mounts": sorted(
            line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
        ),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/leasecron-*")),
    }


def test_a_node_runs_a_pod_and_stops_leaving_nothing_behind() -> None:
    missing = missing_node_prerequisites()
    if missing:
        pytest.skip("; ".join(missing))
    before = host_state()
    started = time.monotonic()
    node = NodeCluster()
    with node:
        ready = time.monotonic() - started
        node.kubectl("apply", "-f", "-", input=POD)
        poll(
            lambda: (
                node.kubectl(
                    "get", "pod", "pause", "-o", "jsonpath={.status.containerStatuses[0].ready}"
                )
                == "true"
            ),
            timeout=60,
            what="the pod Running and Ready",
        )
        running = time.monotonic() - started
        work = node.work_dir
        assert node.leftovers()  # the node's own processes, while it runs
    stopped = time.monotonic() - started - running
    print(f"node Ready {ready:.1f} s, pod Ready {running:.1f} s, stopped in {stopped:.1f} s")
    assert node.leftovers() == []
    after = host_state()
    appeared = Counter(after["mounts"]) - Counter(before["mounts"])  # type: ignore[arg-type]
    vanished = Counter(before["mounts"]) - Counter(after["mounts"])  # type: ignore[arg-type]
    assert after == before, f"mounts appeared: {sorted(appeared)}, vanished: {sorted(vanished)}"
    assert not work.exists()


def test_where_a_node_cannot_run_it_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    real_which = shutil.which
    monkeypatch.setattr(
        _node.shutil, "which", lambda name, **kw: None if name == "runc" else real_which(name, **kw)
    )
    with pytest.raises(ControlPlaneError) as refused:
        NodeCluster().start()
    message = str(refused.value)
    assert "root" in message
    assert "runc (package runc)" in message
