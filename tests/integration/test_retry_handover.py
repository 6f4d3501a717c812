"""A retry handed over against a real API server: the holder of a failed run dies during the
retry back-off, the operator makes the run a retry request, another replica runs the next
attempt under a new, higher token; a late status write of the replaced holder is refused;
each retry is recorded Running before its handler starts."""

from __future__ import annotations

import contextlib
import itertools
import re
import signal
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_helpers import StartOperator, apply_job, poll

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.names import GROUP, JOBRUN_PLURAL, VERSION, jobrun_name
from leasecron.testing import ChildProcess
from leasecron.testing.handlers import run_tick_sync, scheduled_job

GROUP_NAME = "handover"
LONG_BACKOFF = 15
"""Seconds of a back-off longer than the operator takes to hand a run over (the dead
holder's shard grant expires first, 10 s)."""
REPLICA = """
import sys
import time
from leasecron.runtime import Scheduler, Tuning

namespace, identity, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
scheduler = Scheduler(
    "handover", namespace=namespace, identity=identity, grace_period=1.0,
    tuning=Tuning(member_duration_s=2, member_renew_every=0.5),
)

def flaky(ctx):
    print(f"attempt {ctx.tick.isoformat()} {ctx.attempt} {ctx.token}", flush=True)
    start = time.time()
    try:
        if ctx.attempt == 1:
            raise RuntimeError("attempt 1 failed")
        time.sleep(hold)
    finally:
        print(f"ran {start} {time.time()}", flush=True)

scheduler.register("flaky", flaky)
scheduler.run_forever()
"""
_ATTEMPT = re.compile(r"^attempt (\S+) (\d+) (\d+)$")
_RAN = re.compile(r"^ran (\S+) (\S+)$")


@contextlib.contextmanager
def replica(
    kubeconfig: Path, namespace: str, tmp_path: Path, identity: str, hold: float = 0.0
) -> Iterator[ChildProcess]:
    child = ChildProcess(
        name=identity,
        argv=[sys.executable, "-c", REPLICA, namespace, identity, str(hold)],
        log_path=tmp_path / f"{identity}.log",
        env={"KUBECONFIG": str(kubeconfig)},
    )
    try:
        yield child
    finally:
        child.kill()


def attempts_in(tmp_path: Path, identity: str) -> list[tuple[str, int, int]]:
    """(tick, attempt, token) of every attempt the replica's handler started."""
    path = tmp_path / f"{identity}.log"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    found = (_ATTEMPT.match(line.strip()) for line in lines)
    return [(m[1], int(m[2]), int(m[3])) for m in found if m]


def handler_spans(tmp_path: Path, identity: str) -> list[tuple[float, float]]:
    """(start, end) of every handler call the replica made, in order."""
    path = tmp_path / f"{identity}.log"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    found = (_RAN.match(line.strip()) for line in lines)
    return [(float(m[1]), float(m[2])) for m in found if m]


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def jobruns(api: Any, namespace: str) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL, label_selector="leasecron.dev/job=flaky"
    )
    items: list[dict[str, Any]] = listed["items"]
    return sorted(items, key=lambda i: i["spec"].get("tick", ""))


def in_backoff(api: Any, namespace: str) -> dict[str, Any] | None:
    """The first run, once its first attempt is recorded Failed and it is still Running."""
    runs = jobruns(api, namespace)
    if not runs:
        return None
    status = runs[0].get("status") or {}
    attempts = status.get("attempts") or []
    failed = [a.get("outcome") for a in attempts] == ["Failed"]
    return runs[0] if failed and status.get("outcome") == "Running" else None


def every_20s_from_soon(lead: float = 8.0) -> str:
    """A schedule of one tick every 20 s (as `@every 20s`), at a phase whose first tick comes
    `lead` to `lead` + 1 s from now: the time the operator and two replicas take to start,
    instead of a wait of up to 20 s for the epoch's grid."""
    phase = int(time.time() + lead + 1) % 20
    return f"{phase},{phase + 20},{phase + 40} * * * * *"


def handed_over_and_finished(
    api: Any,
    namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    start_operator: StartOperator,
    *,
    backoff: int = 3,
    hold: float = 0.0,
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """Two replicas and the operator; the holder of the first run is killed during its
    back-off. The run as it was then, as it ended, and the killed holder's identity. With
    `hold`, each retried attempt takes that long, and the survivor's next tick has started
    before this returns."""
    apply_job(
        api,
        namespace,
        "flaky",
        group=GROUP_NAME,
        schedule=every_20s_from_soon(),
        retry={"limit": 2, "backoff": f"{backoff}s"},
        lock={"atMostFor": "3s"},
        startingDeadline="10s",
    )
    with (
        start_operator(),
        replica(kubeconfig, namespace, tmp_path, "r1", hold) as r1,
        replica(kubeconfig, namespace, tmp_path, "r2", hold) as r2,
    ):
        before = poll(
            lambda: in_backoff(api, namespace), timeout=40, what="attempt 1 failed, in back-off"
        )
        holder = before["spec"]["holder"]
        {"r1": r1, "r2": r2}[holder].signal(signal.SIGKILL)
        name = before["metadata"]["name"]

        def finished() -> dict[str, Any] | None:
            run = client.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, JOBRUN_PLURAL, name
            )
            outcome = (run.get("status") or {}).get("outcome")
            return run if outcome not in (None, "Running", "Pending") else None

        after = poll(finished, timeout=40, what="the run finished")
        other = "r2" if holder == "r1" else "r1"
        if hold:
            poll(
                lambda: len(handler_spans(tmp_path, other)) >= 2,
                timeout=30,
                what="the survivor's next tick started and ended",
            )
    return before, after, holder


def test_a_holder_killed_during_the_back_off_hands_the_retry_to_another_replica(
    kube_api: Any,
    namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    start_operator: StartOperator,
) -> None:
    before, after, dead = handed_over_and_finished(
        kube_api, namespace, kubeconfig, tmp_path, start_operator, backoff=LONG_BACKOFF, hold=6
    )
    other = "r2" if dead == "r1" else "r1"
    status = after["status"]
    assert status["outcome"] == "Succeeded", status
    assert [a["outcome"] for a in status["attempts"]] == ["Failed", "Succeeded"]
    assert status["attempts"][0] == before["status"]["attempts"][0]
    assert after["spec"]["holder"] == other
    assert after["spec"]["fencingToken"] > before["spec"]["fencingToken"]
    assert after["metadata"]["labels"]["leasecron.dev/trigger"] == "Retry"
    assert after["spec"].get("trigger") == before["spec"].get("trigger")
    # The handed-over attempt kept its back-off after the failed one.
    failed, retried = (parse_time(status["attempts"][i][k]) for i, k in ((0, "end"), (1, "start")))
    assert retried - failed >= timedelta(seconds=LONG_BACKOFF), (failed, retried)
    # concurrencyPolicy Forbid: the survivor's next tick waited for the retry it took over.
    spans = handler_spans(tmp_path, other)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    tick = before["spec"]["tick"].replace("Z", "+00:00")
    ran = [
        (who, a, t) for who in ("r1", "r2") for (k, a, t) in attempts_in(tmp_path, who) if k == tick
    ]
    assert sorted(ran) == sorted(
        [(dead, 1, before["spec"]["fencingToken"]), (other, 2, after["spec"]["fencingToken"])]
    )


@pytest.mark.usefixtures("leasecron_crds")
def test_a_replaced_holders_late_status_write_is_refused(
    kube_api: Any,
    namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    start_operator: StartOperator,
) -> None:
    before, after, dead = handed_over_and_finished(
        kube_api, namespace, kubeconfig, tmp_path, start_operator
    )
    late = {
        "spec": {"holder": dead, "fencingToken": before["spec"]["fencingToken"]},
        "status": {"outcome": "Failed", "message": "attempt 2 failed (late)"},
    }
    api = client.CustomObjectsApi(kube_api)
    with pytest.raises(client.ApiException) as refused:
        api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, JOBRUN_PLURAL, after["metadata"]["name"], late
        )
    assert refused.value.status == 422
    stored = api.get_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL, after["metadata"]["name"]
    )
    assert stored["status"]["outcome"] == "Succeeded"
    assert stored["spec"]["holder"] == after["spec"]["holder"]


def test_each_retry_is_recorded_running_before_its_handler_starts(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    seen: list[list[dict[str, Any]]] = []

    def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("attempt 1 failed")
        run = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, JOBRUN_PLURAL, jobrun_name(ctx.job, ctx.tick)
        )
        seen.append(list((run.get("status") or {}).get("attempts") or []))

    replica = Scheduler(namespace=namespace, kube=kube, grace_period=5)
    replica.register("flaky", flaky)
    job = scheduled_job("flaky", schedule="0 0 1 1 *", retry={"limit": 1, "backoff": "1s"})
    result = run_tick_sync(replica, job)
    assert result.outcome == "Succeeded"
    assert [[a["outcome"] for a in attempts] for attempts in seen] == [["Failed", "Running"]]
    assert result.jobrun is not None
    final = result.jobrun["status"]["attempts"]
    assert [a["outcome"] for a in final] == ["Failed", "Succeeded"]
