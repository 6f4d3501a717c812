"""A claim is not a run, with the operator as a subprocess: a tick claimed on the job's
Lease (as a claim whose reply was lost leaves it) that no replica runs is alarmed as
MissedRun once its run record had the run-record grace to arrive, and a run record that
arrives late but within the grace raises nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api, CustomObjectsApi
from operator_helpers import (
    GROUP,
    VERSION,
    StartOperator,
    apply_job,
    events,
    jobruns,
    poll,
)

from leasecron.models.leases import format_micro_time
from leasecron.models.names import format_tick, jobrun_name
from leasecron.models.specs import JobRun, Outcome

PERIOD_S, DEADLINE_S, GRACE_S = 5, 3, 4
JOB = "claimed"


def next_tick(after: datetime) -> datetime:
    """The first `@every 5s` tick (epoch-anchored) more than two seconds after `after`."""
    base = int(after.timestamp()) + 3
    return datetime.fromtimestamp(base + (-base) % PERIOD_S, tz=UTC)


def claim_by_hand(api: ApiClient, namespace: str, tick: datetime) -> None:
    """Write on the operator's job Lease what a claim of `tick` by a replica writes."""
    coordination = CoordinationV1Api(api)
    name = "leasecron-job-claimed"
    lease = poll(
        lambda: next(
            (
                x
                for x in coordination.list_namespaced_lease(namespace).items
                if x.metadata.name == name
            ),
            None,
        ),
        timeout=10,
        what="the job's Lease created by the operator",
    )
    now = format_micro_time(datetime.now(UTC))
    lease.spec.holder_identity = "ghost-replica"
    lease.spec.lease_duration_seconds = 15
    lease.spec.acquire_time = now
    lease.spec.renew_time = now
    lease.spec.lease_transitions = (lease.spec.lease_transitions or 0) + 1
    lease.metadata.annotations = {
        **(lease.metadata.annotations or {}),
        "leasecron.dev/tick": format_tick(tick),
    }
    coordination.replace_namespaced_lease(name, namespace, lease)


def run_of(api: ApiClient, namespace: str, tick: datetime) -> dict[str, Any] | None:
    name = jobrun_name(JOB, tick)
    return next((r for r in jobruns(api, namespace) if r["metadata"]["name"] == name), None)


def mentions(api: ApiClient, namespace: str, tick: datetime) -> list[Any]:
    return [e for e in events(api, namespace, "MissedRun") if format_tick(tick) in e.message]


def job_spec() -> dict[str, Any]:
    return {
        "schedule": f"@every {PERIOD_S}s",
        "startingDeadline": f"{DEADLINE_S}s",
        "group": "ghosts",
        "handler": "work",
    }


def test_a_claimed_tick_that_no_replica_runs_is_alarmed_as_missed(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    grace = [f"--run-record-grace={GRACE_S}s"]
    with start_operator(extra_args=grace) as operator:
        apply_job(kube_api, namespace, JOB, **job_spec())
        tick = next_tick(datetime.now(UTC))
        claim_by_hand(kube_api, namespace, tick)
        missed = poll(
            lambda: (
                (r := run_of(kube_api, namespace, tick))
                and r["status"]["outcome"] == "Missed"
                and r
            ),
            timeout=PERIOD_S + DEADLINE_S + GRACE_S + 10,
            what=f"tick {format_tick(tick)} recorded as Missed",
        )
        assert "claimed but no run of it was recorded" in missed["status"]["message"]
        warning = poll(
            lambda: mentions(kube_api, namespace, tick), timeout=5, what="announced by an Event"
        )
        assert warning[0].type == "Warning"
        assert "claimed but no run" in warning[0].message
        assert operator.metric("leasecron_missed_runs_total", job=JOB) >= 1


def test_a_run_record_arriving_late_but_within_the_grace_raises_no_alarm(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    grace = [f"--run-record-grace={GRACE_S}s"]
    with start_operator(extra_args=grace):
        job = apply_job(kube_api, namespace, JOB, **job_spec())
        tick = next_tick(datetime.now(UTC))
        claim_by_hand(kube_api, namespace, tick)
        late = tick + timedelta(seconds=DEADLINE_S + 2)  # after an unclaimed tick is judged
        poll(lambda: datetime.now(UTC) >= late, timeout=PERIOD_S + 10, what="past the deadline")
        run = JobRun.for_tick(
            job=JOB,
            tick=tick,
            holder="ghost-replica",
            start=tick,
            fencing_token=1,
            namespace=namespace,
        ).finish(outcome=Outcome.SUCCEEDED, end=datetime.now(UTC))
        # A Missed record written by the operator already would make this create fail (409).
        CustomObjectsApi(kube_api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "jobruns", run.to_resource(job_uid=job["metadata"]["uid"])
        )
        following = tick + timedelta(seconds=PERIOD_S)  # unclaimed: judged after tick's grace
        poll(
            lambda: (
                (r := run_of(kube_api, namespace, following)) and r["status"]["outcome"] == "Missed"
            ),
            timeout=PERIOD_S + DEADLINE_S + 10,
            what="the next, unclaimed tick judged",
        )
        assert following + timedelta(seconds=DEADLINE_S) > tick + timedelta(
            seconds=DEADLINE_S + GRACE_S
        )
        recorded = run_of(kube_api, namespace, tick)
        assert recorded is not None and recorded["status"]["outcome"] == "Succeeded"
        assert mentions(kube_api, namespace, tick) == []
