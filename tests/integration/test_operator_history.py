"""JobRun history with the operator as a subprocess: runs of a vanished holder become
Abandoned, history is pruned to the job's limits, and deleting a job removes its Lease and
JobRuns (garbage collection through owner references)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from operator_helpers import (
    GROUP,
    VERSION,
    StartOperator,
    StartReplica,
    apply_job,
    jobruns,
    leases,
    poll,
)

from leasecron.models.specs import JobRun, Outcome


def finished_run(job: dict[str, Any], tick: datetime, outcome: Outcome) -> dict[str, Any]:
    namespace = job["metadata"]["namespace"]
    run = JobRun.for_tick(
        job=job["metadata"]["name"],
        tick=tick,
        holder="replica-a",
        start=tick,
        fencing_token=1,
        namespace=namespace,
    ).finish(outcome=outcome, end=tick + timedelta(seconds=1))
    return run.to_resource(job_uid=job["metadata"]["uid"])


def create_runs(api: ApiClient, namespace: str, bodies: list[dict[str, Any]]) -> None:
    objects = CustomObjectsApi(api)
    for body in bodies:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobruns", body)


def by_outcome(api: ApiClient, namespace: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for run in jobruns(api, namespace):
        found.setdefault(run["status"]["outcome"], []).append(run["spec"]["tick"])
    return {outcome: sorted(ticks) for outcome, ticks in found.items()}


def test_history_is_pruned_to_the_configured_limits_keeping_the_newest(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    job = apply_job(
        kube_api,
        namespace,
        "report",
        schedule="0 2 * * *",
        history={"succeeded": 2, "failed": 1},
    )
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    ticks = [base + timedelta(minutes=i) for i in range(9)]
    outcomes = [Outcome.SUCCEEDED] * 5 + [Outcome.FAILED, Outcome.MISSED, Outcome.ABANDONED]
    outcomes.append(Outcome.LOST_LOCK)
    create_runs(
        kube_api,
        namespace,
        [finished_run(job, tick, outcome) for tick, outcome in zip(ticks, outcomes, strict=True)],
    )
    with start_operator():
        kept = poll(
            lambda: (
                (found := by_outcome(kube_api, namespace))
                and sum(len(t) for t in found.values()) == 3
                and found
            ),
            timeout=10,
            what="pruned",
        )
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    assert kept == {
        "Succeeded": [ticks[3].strftime(stamp), ticks[4].strftime(stamp)],
        "LostLock": [ticks[8].strftime(stamp)],
    }


def test_deleting_a_job_removes_its_lease_and_jobruns(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    """A single-owner job (the bucket whose jobs have a Lease of their own)."""
    job = apply_job(kube_api, namespace, "report", bucket="single-owner", schedule=None)
    tick = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    create_runs(kube_api, namespace, [finished_run(job, tick, Outcome.SUCCEEDED)])
    with start_operator():
        poll(
            lambda: [
                x for x in leases(kube_api, namespace) if x.metadata.name == "leasecron-job-report"
            ],
            timeout=5,
            what="the job's Lease created",
        )
        CustomObjectsApi(kube_api).delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", "report"
        )

        def gone() -> bool:
            job_leases = [
                x
                for x in leases(kube_api, namespace)
                if (x.metadata.labels or {}).get("leasecron.dev/job") == "report"
            ]
            return not job_leases and not jobruns(kube_api, namespace)

        # The garbage collector learns of a newly created CRD's objects at its next resync
        # (about 30 s), so a cluster whose CRDs were just created needs longer than that.
        poll(gone, timeout=75, what="collected with the job")


def test_a_replica_killed_in_the_middle_of_a_run_leaves_an_abandoned_jobrun(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
    start_replica: StartReplica,
) -> None:
    apply_job(
        kube_api,
        namespace,
        "long",
        schedule="@every 2s",
        startingDeadline="5s",
        group="workers",
        handler="long_job",
        lock={"atMostFor": "3s", "keepAlive": True},
    )
    with (
        start_operator(),
        start_replica(
            identity="worker",
            group="workers",
            handlers="long_job",
            run_seconds=120,
        ) as replica,
    ):
        running = poll(
            lambda: [
                r for r in jobruns(kube_api, namespace) if r["status"].get("outcome") == "Running"
            ],
            timeout=20,
            what="running",
        )
        name = running[0]["metadata"]["name"]
        replica.kill()  # SIGKILL: no cleanup, no release

        def outcome() -> dict[str, Any] | None:
            run = next(
                (r for r in jobruns(kube_api, namespace) if r["metadata"]["name"] == name), None
            )
            return run["status"] if run and run["status"]["outcome"] != "Running" else None

        status = poll(outcome, timeout=20, what="finished by the operator")
    assert status["outcome"] == "Abandoned"
    assert status.get("end")
    assert "worker" in status["message"]
