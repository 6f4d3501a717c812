"""The operator as a subprocess against the real API server: validation conditions, handler
coverage, the job's Lease, its own election Lease as `leasecron status` finds it, and kopf
staying out of the objects (only status is written)."""

from __future__ import annotations

import time
from pathlib import Path

from click.testing import CliRunner
from kubernetes.client import ApiClient, CustomObjectsApi
from operator_helpers import (
    StartOperator,
    StartReplica,
    apply_job,
    get_job,
    job_condition,
    leases,
    poll,
)

from leasecron.cli import kubectl_plugin
from leasecron.cli._status import NO_OPERATOR


def test_valid_and_invalid_jobs_get_their_conditions_within_five_seconds(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    with start_operator():
        applied = time.monotonic()
        apply_job(kube_api, namespace, "good", schedule="*/5 * * * *")
        apply_job(kube_api, namespace, "bad-cron", schedule="61 * * * *")
        apply_job(kube_api, namespace, "bad-zone", schedule="0 2 * * *", timeZone="Mars/Base")

        def all_judged() -> bool:
            return all(
                job_condition(kube_api, namespace, name, "Valid") is not None
                for name in ("good", "bad-cron", "bad-zone")
            )

        poll(all_judged, timeout=5, what="judged")
        assert time.monotonic() - applied < 5
        good = job_condition(kube_api, namespace, "good", "Valid")
        cron = job_condition(kube_api, namespace, "bad-cron", "Valid")
        zone = job_condition(kube_api, namespace, "bad-zone", "Valid")
        assert good is not None and good["status"] == "True"
        assert cron is not None and (cron["status"], cron["reason"]) == ("False", "InvalidSchedule")
        assert "spec.schedule" in cron["message"] and "'61 * * * *'" in cron["message"]
        assert zone is not None and (zone["status"], zone["reason"]) == ("False", "InvalidTimeZone")
        assert "spec.timeZone" in zone["message"] and "Mars/Base" in zone["message"]
        for name in ("bad-cron", "bad-zone"):
            ready = job_condition(kube_api, namespace, name, "Ready")
            assert ready is not None and ready["status"] == "False"


def test_a_job_is_ready_only_while_a_live_replica_registered_its_handler(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
    start_replica: StartReplica,
) -> None:
    apply_job(
        kube_api,
        namespace,
        "report",
        schedule="0 2 * * *",
        group="billing-api",
        handler="nightly_report",
    )
    with start_operator():

        def ready_reason() -> str | None:
            ready = job_condition(kube_api, namespace, "report", "Ready")
            return f"{ready['status']}/{ready['reason']}" if ready else None

        assert poll(ready_reason, timeout=5, what="judged") == "False/NoReplicas"
        ready = job_condition(kube_api, namespace, "report", "Ready")
        assert ready is not None
        assert "no live replica of group billing-api" in ready["message"].lower()
        with start_replica(
            identity="other",
            group="billing-api",
            handlers="something_else",
        ):
            poll(
                lambda: ready_reason() == "False/HandlerNotRegistered",
                timeout=15,
                what="HandlerNotRegistered",
            )
            ready = job_condition(kube_api, namespace, "report", "Ready")
            assert ready is not None
            assert (
                "no live replica of group billing-api has registered handler nightly_report"
                in ready["message"].lower()
            )
        with start_replica(
            identity="worker",
            group="billing-api",
            handlers="nightly_report",
        ):
            poll(lambda: ready_reason() == "True/HandlerRegistered", timeout=15, what="Ready")
            assert get_job(kube_api, namespace, "report")["status"]["replicas"] == 1


def test_a_single_owner_job_gets_an_owned_labelled_lease_and_only_its_status_is_written(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    created = apply_job(kube_api, namespace, "report", bucket="single-owner", schedule=None)
    with start_operator():

        def job_lease() -> object:
            return next(
                (
                    lease
                    for lease in leases(kube_api, namespace)
                    if lease.metadata.name == "leasecron-job-report"
                ),
                None,
            )

        lease = poll(job_lease, timeout=5, what="created")
        poll(
            lambda: job_condition(kube_api, namespace, "report", "Ready"),
            timeout=5,
            what="status written",
        )
    labels = lease.metadata.labels  # type: ignore[attr-defined]
    assert labels["leasecron.dev/job"] == "report"
    assert labels["leasecron.dev/role"] == "leader"
    owners = lease.metadata.owner_references  # type: ignore[attr-defined]
    assert [(o.kind, o.name, o.uid) for o in owners] == [
        ("ScheduledJob", "report", created["metadata"]["uid"])
    ]
    job = CustomObjectsApi(kube_api).get_namespaced_custom_object(
        "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", "report"
    )
    writers = {(m["manager"], m.get("subresource", "")) for m in job["metadata"]["managedFields"]}
    assert ("leasecron-operator", "status") in writers
    assert all(sub == "status" for manager, sub in writers if manager != "OpenAPI-Generator")
    assert not job["metadata"].get("finalizers")
    assert not any(key.startswith("kopf.") for key in job["metadata"].get("annotations") or {})


def test_a_sharded_job_shows_the_holder_of_its_shard_lease_while_it_runs(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
    start_replica: StartReplica,
) -> None:
    """A once-per-tick job is claimed through its group's shard Lease and has no Lease of its
    own: HOLDER is the holder of its shard Lease while a grant is live."""
    apply_job(
        kube_api,
        namespace,
        "short",
        schedule="@every 5s",
        group="sharded",
        handler="short",
        lock={"keepAlive": False, "atMostFor": "10s"},
    )
    with (
        start_operator(),
        start_replica(identity="worker-1", group="sharded", handlers="short", run_seconds=3),
    ):

        def holder() -> str | None:
            return (get_job(kube_api, namespace, "short").get("status") or {}).get("holder")

        poll(lambda: holder() == "worker-1", timeout=30, what="the shard holder as HOLDER")
        own = [
            lease
            for lease in leases(kube_api, namespace)
            if lease.metadata.name == "leasecron-job-short"
        ]
        assert not own


def test_the_operators_election_is_a_leader_lease_that_status_finds(
    kube_api: ApiClient, kubeconfig: Path, namespace: str, start_operator: StartOperator
) -> None:
    apply_job(kube_api, namespace, "report", schedule="*/5 * * * *")
    with start_operator():
        [election] = [
            o for o in leases(kube_api, namespace) if o.metadata.name == "leasecron-operator"
        ]
        labels = election.metadata.labels
        assert labels["leasecron.dev/role"] == "leader"
        assert labels["app.kubernetes.io/component"] == "operator"
        args = ["status", "--kubeconfig", str(kubeconfig), "-n", namespace]
        result = CliRunner().invoke(kubectl_plugin, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split()[0] == "report"
    assert NO_OPERATOR not in result.stderr
