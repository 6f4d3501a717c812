"""The tutorial of the documentation site (docs/tutorial.md), done as it says: the
ScheduledJob examples/tutorial/hello.yaml applied, three replicas of examples/tutorial/app.py
started, every tick printed by one replica only, and the ticks going on when the replica that
ran the last one is stopped."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from leasecron.testing import ChildProcess, poll, stop_children

TUTORIAL = Path(__file__).resolve().parents[2] / "examples" / "tutorial"


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def on_line(self, data: dict[str, Any], _received: float) -> None:
        with self._lock:
            self.lines.append(data)

    def ticks(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.lines)


def test_three_replicas_of_the_tutorial_app_run_each_tick_once_and_survive_a_stopped_one(
    kubeconfig: Path, kube_api: Any, namespace: str, leasecron_crds: list[str], tmp_path: Path
) -> None:
    job = yaml.safe_load((TUTORIAL / "hello.yaml").read_text(encoding="utf-8"))
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", job
    )
    seen = Lines()
    replicas = {
        f"replica-{i}": ChildProcess(
            name=f"replica-{i}",
            argv=[sys.executable, str(TUTORIAL / "app.py")],
            log_path=tmp_path / f"replica-{i}.log",
            env={
                "KUBECONFIG": str(kubeconfig),
                "POD_NAMESPACE": namespace,
                "POD_NAME": f"replica-{i}",
            },
            on_line=seen.on_line,
        )
        for i in (1, 2, 3)
    }
    try:
        first = poll(lambda: len(seen.ticks()) >= 3 and seen.ticks(), timeout=60, what="3 ticks")
        holder = next(name for name in replicas if first[-1]["holder"].startswith(name))
        replicas.pop(holder).stop()
        count = len(seen.ticks())
        poll(lambda: len(seen.ticks()) >= count + 2, timeout=30, what="2 ticks after a stop")
    finally:
        stop_children(replicas.values(), grace=5.0)
    lines = seen.ticks()
    assert all(n == 1 for n in Counter(line["tick"] for line in lines).values()), lines
    tokens = [line["token"] for line in sorted(lines, key=lambda line: line["tick"])]
    assert tokens == sorted(tokens), lines
    assert not any(line["holder"].startswith(holder) for line in lines[count:]), lines
