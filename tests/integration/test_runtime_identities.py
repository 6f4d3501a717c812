"""Replica identities against a real API server: two live processes that run with one
identity take each other's grants for their own, so a replica notices another live process
writing its member Lease and says so (error log, `leasecron_identity_conflicts_total`); the
default identity is unique per process and never conflicts."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from kubernetes import client
from operator_helpers import StartOperator, StartReplica, apply_job
from prometheus_client import REGISTRY

from leasecron import Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.names import member_lease_name
from leasecron.runtime import Tuning
from leasecron.testing import poll

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=0.5)


def conflicts(group: str) -> float:
    value = REGISTRY.get_sample_value("leasecron_identity_conflicts_total", {"group": group})
    return value or 0.0


def _schedulers(kube: Kube, namespace: str, group: str, identity: str | None) -> list[Scheduler]:
    made = [
        Scheduler(group, namespace=namespace, kube=kube, tuning=FAST, identity=identity)
        for _ in range(2)
    ]
    for scheduler in made:
        scheduler.start()
    for scheduler in made:
        assert scheduler.wait_ready(30)
    return made


def test_two_live_processes_with_one_identity_are_reported(kube: Kube, namespace: str) -> None:
    schedulers = _schedulers(kube, namespace, "twins", "replica-0")
    try:
        poll(lambda: conflicts("twins") >= 2, timeout=20, what="identity conflicts counted")
    finally:
        for scheduler in schedulers:
            scheduler.stop()


def test_replicas_with_default_identities_never_conflict(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    schedulers = _schedulers(kube, namespace, "distinct", None)
    leases = client.CoordinationV1Api(kube_api)

    def renewed_for(identity: str) -> float:
        lease = leases.read_namespaced_lease(member_lease_name("distinct", identity), namespace)
        return (lease.spec.renew_time - lease.spec.acquire_time).total_seconds()

    try:
        # Each renews every 0.5 s: six renewals each, none of which may meet the other's write.
        poll(
            lambda: all(renewed_for(s.identity) >= 3 for s in schedulers),
            timeout=20,
            what="3 s of renewals of both member Leases",
        )
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    assert conflicts("distinct") == 0


def _long_runs(api: Any, namespace: str) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "leasecron.dev", "v1alpha1", namespace, "jobruns", label_selector="leasecron.dev/job=long"
    )
    items: list[dict[str, Any]] = listed["items"]
    return items


def test_a_fixed_identity_restarted_finishes_the_runs_its_dead_process_left_running(
    kube_api: Any, namespace: str, start_operator: StartOperator, start_replica: StartReplica
) -> None:
    """The operator abandons a run whose holder vanished, but a holder whose identity came
    back in a new process looks alive: the new process finishes its predecessor's runs."""
    apply_job(kube_api, namespace, "long", schedule="@every 2s")
    with start_operator():
        with start_replica(
            identity="fixed", group="default", handlers="long", run_seconds=60
        ) as first:

            def running() -> str | None:
                for run in _long_runs(kube_api, namespace):
                    if (run.get("status") or {}).get("outcome") == "Running":
                        return str(run["metadata"]["name"])
                return None

            name = poll(running, timeout=30, what="a Running JobRun")
            first.signal(signal.SIGKILL)
        with start_replica(identity="fixed", group="default", handlers="long", run_seconds=0.1):

            def finished() -> dict[str, Any] | None:
                for run in _long_runs(kube_api, namespace):
                    status = run.get("status") or {}
                    if run["metadata"]["name"] == name and status.get("outcome") != "Running":
                        return run
                return None

            run = poll(finished, timeout=30, what="the dead process's run finished")
    assert run["status"]["outcome"] == "Abandoned", run["status"]
    assert run["spec"]["holder"] == "fixed"
