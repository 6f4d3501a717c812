"""What `leasecron operator` prints when stderr is not a terminal (a pod, a pipe): one JSON
object per line, for leasecron's own events and for what kopf and the Kubernetes client log
through the standard library, from start to SIGTERM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient
from operator_helpers import StartOperator, apply_job, job_condition, poll


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_line_the_operator_prints_to_a_pipe_is_one_json_event(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    with start_operator(log_level="debug") as operator:
        apply_job(kube_api, namespace, "good", schedule="*/5 * * * *")
        apply_job(kube_api, namespace, "bad-cron", schedule="61 * * * *")
        poll(
            lambda: job_condition(kube_api, namespace, "bad-cron", "Valid"),
            timeout=15,
            what="judged",
        )
    assert operator.exit_code() == 0

    lines = _lines(operator.log_path)
    not_json = []
    events: list[dict[str, Any]] = []
    for line in lines:
        try:
            parsed = json.loads(line)
        except ValueError:
            not_json.append(line)
            continue
        if isinstance(parsed, dict):
            events.append(parsed)
        else:
            not_json.append(line)
    assert not_json == []
    assert all({"event", "level", "timestamp", "logger"} <= set(e) for e in events)
    loggers = {str(e["logger"]).split(".")[0] for e in events}
    assert {"leasecron", "kopf"} <= loggers, loggers
    assert any(e["event"] == "active operator" for e in events)
