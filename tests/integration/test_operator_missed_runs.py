"""Missed-run alarms with the operator as a subprocess: a job nobody runs is flagged with a
condition, a Warning Event and a Missed JobRun, and a replica that starts running it clears
the alarm."""

from __future__ import annotations

from kubernetes.client import ApiClient
from operator_helpers import (
    StartOperator,
    StartReplica,
    apply_job,
    events,
    get_job,
    job_condition,
    jobruns,
    metric,
    poll,
)


def test_a_job_nobody_runs_is_flagged_missed_and_cleared_once_a_replica_runs_it(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
    start_replica: StartReplica,
) -> None:
    with start_operator() as operator:
        apply_job(
            kube_api,
            namespace,
            "ping",
            schedule="@every 2s",
            startingDeadline="3s",
            group="pingers",
            handler="ping",
        )

        def on_schedule() -> str | None:
            found = job_condition(kube_api, namespace, "ping", "OnSchedule")
            return f"{found['status']}/{found['reason']}" if found else None

        poll(lambda: on_schedule() == "False/MissedRun", timeout=10, what="flagged MissedRun")
        missed = poll(
            lambda: [
                r for r in jobruns(kube_api, namespace) if r["status"].get("outcome") == "Missed"
            ],
            timeout=5,
            what="recorded as a Missed JobRun",
        )
        assert missed[0]["spec"]["job"] == "ping"
        assert missed[0]["metadata"]["ownerReferences"][0]["name"] == "ping"
        warning = poll(
            lambda: events(kube_api, namespace, "MissedRun"),
            timeout=5,
            what="announced by an Event",
        )
        assert warning[0].type == "Warning"
        assert warning[0].involved_object.name == "ping"
        assert get_job(kube_api, namespace, "ping")["status"]["missedRuns"] >= 1
        assert metric(operator, "leasecron_missed_runs_total", scheduled_job="ping") >= 1

        with start_replica(identity="pinger", group="pingers", handlers="ping"):
            poll(lambda: on_schedule() == "True/RunsStarted", timeout=15, what="cleared")
            ran = poll(
                lambda: [
                    r
                    for r in jobruns(kube_api, namespace)
                    if r["status"].get("outcome") in ("Running", "Succeeded")
                ],
                timeout=5,
                what="the replica's runs recorded",
            )
            assert ran[0]["spec"]["holder"] == "pinger"
