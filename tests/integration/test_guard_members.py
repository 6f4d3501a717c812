"""Job guards as members of their job's group, against the real API server: a ScheduledJob
that only guards run is `Ready` with one replica per guarding identity while they live and
not `Ready` once they close, and `status.holder` is a guard run's holder while it holds its
grant; a Scheduler and job guards of one group and identity in one
process keep one member Lease with both their handlers, without counting an identity
conflict, and the guards keep it after the Scheduler stops; `leasecron run` refuses a job only
guards run (nobody would pick the request up), naming the job and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes import client
from kubernetes.client import ApiClient
from operator_helpers import StartOperator, apply_job, get_job, job_condition, jobruns, poll
from prometheus_client import REGISTRY

from leasecron import Scheduler
from leasecron.cli import main
from leasecron.kube.clients import Kube
from leasecron.models.names import member_lease_name
from leasecron.runtime import Guard, Tuning, close_guards

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("closed_guards")]
GROUP = "reports"
JOB = "nightly-report"
REPLICAS = 4
FAST = Tuning(member_duration_s=3, member_renew_every=0.5)


def status(kube_api: ApiClient, namespace: str) -> dict[str, Any]:
    return dict(get_job(kube_api, namespace, JOB).get("status") or {})


def ready(kube_api: ApiClient, namespace: str) -> tuple[str, int] | None:
    """(Ready status, status.replicas) of the job, None before the operator wrote them."""
    found = job_condition(kube_api, namespace, JOB, "Ready")
    replicas = status(kube_api, namespace).get("replicas")
    return (found["status"], replicas) if found and replicas is not None else None


def member(kube_api: ApiClient, namespace: str, identity: str) -> Any:
    try:
        return client.CoordinationV1Api(kube_api).read_namespaced_lease(
            member_lease_name(GROUP, identity), namespace
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def handlers(lease: Any) -> set[str] | None:
    return set(json.loads(lease.metadata.annotations["leasecron.dev/handlers"])) if lease else None


def conflicts() -> float:
    value = REGISTRY.get_sample_value("leasecron_identity_conflicts_total", {"group": GROUP})
    return value or 0.0


def test_a_job_only_guards_run_is_ready_with_one_replica_per_guarding_identity_until_they_close(
    kube_api: ApiClient, kubes: list[Kube], namespace: str, start_operator: StartOperator
) -> None:
    with start_operator():
        apply_job(kube_api, namespace, JOB, group=GROUP, startingDeadline="30s")
        poll(
            lambda: ready(kube_api, namespace) == ("False", 0),
            timeout=30,
            what="the job not Ready before any guard ran",
        )
        # Three identities; the fourth guard shares r0's identity (and so its member Lease).
        identities = ["r0", "r1", "r2", "r0"]
        guards = [
            Guard("nightly", job=JOB, namespace=namespace, kube=kubes[i], identity=identity)
            for i, identity in enumerate(identities)
        ]
        first = guards[0].claim_sync()
        assert first
        # The same tick: with `@every 1s`, a later call could meet the next one.
        others = [g.claim_sync(tick=first.tick) for g in guards[1:]]
        assert not any(others)  # skipped while r0 holds the tick, and they count all the same
        poll(
            lambda: ready(kube_api, namespace) == ("True", 3),
            timeout=30,
            what="Ready with three replicas",
        )
        poll(
            lambda: status(kube_api, namespace).get("holder") == "r0",
            timeout=30,
            what="status.holder the holder of the guard run",
        )
        guards[0].finish_sync(first)
        poll(
            lambda: not status(kube_api, namespace).get("holder"),
            timeout=30,
            what="no status.holder once the guard run released its grant",
        )
        assert handlers(member(kube_api, namespace, "r0")) == {JOB}
        close_guards()
        for identity in ("r0", "r1", "r2"):
            assert member(kube_api, namespace, identity) is None
        poll(
            lambda: ready(kube_api, namespace) == ("False", 0),
            timeout=30,
            what="not Ready once the guards closed",
        )
    assert conflicts() == 0


def test_a_scheduler_and_job_guards_of_one_identity_share_one_member_lease(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    apply_job(kube_api, namespace, JOB, group=GROUP, startingDeadline="30s")
    scheduler = Scheduler(GROUP, namespace=namespace, kube=kubes[0], tuning=FAST, identity="pod")
    scheduler.register("cleanup", lambda ctx: None)
    scheduler.start()
    try:
        assert scheduler.wait_ready(30)
        before = conflicts()
        Guard("nightly", job=JOB, namespace=namespace, kube=kubes[1], identity="pod").claim_sync()
        poll(
            lambda: handlers(member(kube_api, namespace, "pod")) == {"cleanup", JOB},
            timeout=20,
            what="the Scheduler's member Lease listing the guard's handler too",
        )

        def renewed() -> float:
            lease = member(kube_api, namespace, "pod")
            return (lease.spec.renew_time - lease.spec.acquire_time).total_seconds()

        poll(lambda: renewed() >= 3, timeout=20, what="3 s of renewals of the shared Lease")
        assert conflicts() == before
    finally:
        scheduler.stop()
    # The guards keep the Lease (not deleted by the Scheduler) and list their handler only.
    poll(
        lambda: handlers(member(kube_api, namespace, "pod")) == {JOB},
        timeout=20,
        what="the guards' member Lease after the Scheduler stopped",
    )
    close_guards()
    assert member(kube_api, namespace, "pod") is None


def test_leasecron_run_refuses_a_job_only_guards_run_naming_the_job_and_why(
    kube_api: ApiClient, kubes: list[Kube], namespace: str, kubeconfig: Path
) -> None:
    apply_job(kube_api, namespace, JOB, group=GROUP, schedule="@every 1h", startingDeadline="30s")
    with Guard("nightly", job=JOB, namespace=namespace, kube=kubes[0], identity="r0").claim():
        pass
    poll(
        lambda: handlers(member(kube_api, namespace, "r0")) == {JOB},
        timeout=20,
        what="the guard's member Lease listing the job's handler",
    )
    options = ["run", JOB, "--kubeconfig", str(kubeconfig), "-n", namespace]
    result = CliRunner().invoke(main, options)
    assert result.exit_code == 1, result.output
    assert f"{JOB} is run only by job= guards (r0)" in result.output
    assert "never picks up a requested run" in result.output
    runs = jobruns(kube_api, namespace)
    assert not [r for r in runs if r["spec"].get("trigger") == "Manual"], runs
