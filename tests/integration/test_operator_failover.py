"""The operator's own high availability, with two operator subprocesses: one is active, the
standby writes nothing, and killing or stopping the active one hands the work over; an
operator that loses its Lease exits so that it restarts as a standby."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from kubernetes.client import ApiClient, CoordinationV1Api
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    StartOperator,
    apply_job,
    get_job,
    metric,
    poll,
    samples,
)

from leasecron.bench._operator_process import OperatorSubprocess
from leasecron.operator import EXIT_LOST_LEADERSHIP

WRITE_VERBS = ("create", "update", "patch", "delete")
READ_VERBS = ("get", "list", "watch")


def writes(operator: OperatorSubprocess) -> float:
    """Every write request the process sent, whoever it was for (election included). Every
    request is counted by verb, and every verb must be a known read or write."""
    found = samples(operator, "leasecron_api_requests_total")
    verbs = {sample.get("verb") for sample, _ in found}
    assert found and verbs <= {*READ_VERBS, *WRITE_VERBS}, f"unknown verbs: {verbs}"
    return sum(v for sample, v in found if sample["verb"] in WRITE_VERBS)


def election_lease(api: ApiClient, namespace: str) -> tuple[str, float, float]:
    """(holder, acquireTime, renewTime) of the operator's election Lease, times in seconds."""
    spec = CoordinationV1Api(api).read_namespaced_lease("leasecron-operator", namespace).spec
    assert spec is not None and spec.acquire_time is not None and spec.renew_time is not None
    holder = spec.holder_identity or ""
    return holder, spec.acquire_time.timestamp(), spec.renew_time.timestamp()


def missed_runs(api: ApiClient, namespace: str) -> int:
    return int((get_job(api, namespace, "ping").get("status") or {}).get("missedRuns") or 0)


def operator_process(
    kubeconfig: Path, namespace: str, tmp_path: Path, identity: str, **timing: str
) -> OperatorSubprocess:
    """An operator with the chart's election timings scaled down (10s / 8s / 1s)."""
    return OperatorSubprocess(
        kubeconfig=kubeconfig,
        log_path=tmp_path / f"{identity}.log",
        namespaces=[namespace],
        election_namespace=namespace,
        identity=identity,
        **({"lease_duration": "10s", "renew_deadline": "8s", "retry_period": "1s"} | timing),
    )


def standby(kubeconfig: Path, namespace: str, tmp_path: Path, **timing: str) -> OperatorSubprocess:
    operator = operator_process(kubeconfig, namespace, tmp_path, "standby", **timing)
    operator.wait(operator.ready, timeout=30, what="ready")
    return operator


def take_lease(api: ApiClient, namespace: str) -> bool:
    """Overwrite the election Lease as another holder would (False on a lost race)."""
    leases = CoordinationV1Api(api)
    lease = leases.read_namespaced_lease("leasecron-operator", namespace)
    lease.spec.holder_identity = "intruder"
    lease.spec.lease_transitions = (lease.spec.lease_transitions or 0) + 1
    lease.spec.lease_duration_seconds = 60
    try:
        leases.replace_namespaced_lease("leasecron-operator", namespace, lease)
    except ApiException as e:
        if e.status == 409:
            return False
        raise
    return True


def test_killing_the_active_operator_hands_the_work_to_the_standby_which_wrote_nothing_before(
    kube_api: ApiClient,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    start_operator: StartOperator,
) -> None:
    short = {"lease_duration": "3s", "renew_deadline": "2s", "retry_period": "500ms"}
    with start_operator(name="active", **short) as active:
        second = standby(kubeconfig, namespace, tmp_path, **short)
        try:
            assert second.get("/readyz")[1].startswith("ok: standby")
            apply_job(kube_api, namespace, "ping", schedule="@every 1s", startingDeadline="1s")
            poll(lambda: missed_runs(kube_api, namespace) >= 2, timeout=10, what="alarmed")
            assert metric(active, "leasecron_operator_writes_total") > 0
            assert writes(active) > 0
            assert writes(second) == 0
            assert metric(second, "leasecron_operator_writes_total") == 0

            active.signal(signal.SIGKILL)
            killed = time.monotonic()
            # The dead leader's last renewal, read before the standby can take over (>= 1 s
            # away: it renews every 500 ms within a 3 s lease). It stamps renewTime before it
            # writes and the standby starts its 3 s when it observes the write, so the
            # standby's own acquireTime cannot be earlier than renewTime + 3 s.
            holder, _, renewed = election_lease(kube_api, namespace)
            assert holder == "active"
            second.wait(second.leading, timeout=10, what="leading after the kill")
            took_over = time.monotonic() - killed
            holder, acquired, _ = election_lease(kube_api, namespace)
            assert holder == "standby"
            assert acquired >= renewed + 3 - 0.05, "the standby took a Lease that was still live"
            before = missed_runs(kube_api, namespace)
            poll(
                lambda: missed_runs(kube_api, namespace) > before,
                timeout=10,
                what="kept up by the new leader",
            )
            assert metric(second, "leasecron_operator_writes_total") > 0
            assert took_over < 3 + 3  # leaseDuration 3s, plus the standby's detection
        finally:
            second.stop()


def test_a_stopped_operator_releases_its_lease_so_the_standby_takes_over_at_once(
    kube_api: ApiClient,
    kubeconfig: Path,
    namespace: str,
    leasecron_crds: list[str],
    tmp_path: Path,
) -> None:
    active = operator_process(kubeconfig, namespace, tmp_path, "active")
    active.wait(active.leading, timeout=30, what="leading")
    second = operator_process(kubeconfig, namespace, tmp_path, "standby")
    try:
        second.wait(second.ready, timeout=30, what="ready")
        stopped = time.monotonic()
        assert active.stop() == 0
        second.wait(second.leading, timeout=5, what="leading after the release")
        assert time.monotonic() - stopped < 10  # well before the 10 s lease would expire
    finally:
        active.stop()
        second.stop()


def test_an_operator_that_loses_its_lease_stops_and_exits_to_restart_as_a_standby(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    with start_operator(name="active") as active:
        poll(lambda: take_lease(kube_api, namespace), timeout=5, what="taken by an intruder")
        poll(lambda: active.exit_code() is not None, timeout=10, what="exited")
        assert active.exit_code() == EXIT_LOST_LEADERSHIP
        assert "lost the operator lease" in active.log_tail()
