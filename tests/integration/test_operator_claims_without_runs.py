"""A claim is not a run, with the operator as a subprocess: a tick claimed on the job's
shard Lease (as a claim whose reply was lost leaves it) that no replica runs is alarmed as
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

from leasecron import Scheduler
from leasecron.coordination.resourcelocks import ROLE_SHARD
from leasecron.coordination.shards import shard_labels
from leasecron.kube.clients import Kube
from leasecron.models.groups import shard_ref
from leasecron.models.leases import LeaseRecord, lease_body
from leasecron.models.names import LABEL_ROLE, format_tick, jobrun_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.models.specs import JobRun, Outcome
from leasecron.runtime import Tuning
from leasecron.testing.faults import Fault, fault_plan
from leasecron.testing.handlers import CapturingHandler

PERIOD_S, DEADLINE_S, GRACE_S = 5, 3, 4
JOB = "claimed"
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)


def next_tick(after: datetime) -> datetime:
    """The first `@every 5s` tick (epoch-anchored) more than two seconds after `after`."""
    base = int(after.timestamp()) + 3
    return datetime.fromtimestamp(base + (-base) % PERIOD_S, tz=UTC)


def claim_by_hand(api: ApiClient, namespace: str, tick: datetime) -> None:
    """Write on the job's shard Lease what a claim of `tick` by a replica writes (the group
    has no record yet: it has the default shard count)."""
    coordination = CoordinationV1Api(api)
    ref = shard_ref("ghosts", JOB, shards=DEFAULT_SHARDS)
    now = datetime.now(UTC)
    record = LeaseRecord(
        holder="ghost-replica",
        lease_duration_s=15,
        acquire_time=now,
        renew_time=now,
        transitions=1,
        tick=tick,
    )
    labels = {LABEL_ROLE: ROLE_SHARD, **shard_labels("ghosts", ref)}
    body = lease_body(record, labels=labels)
    body["metadata"]["name"] = ref.lease
    coordination.create_namespaced_lease(namespace, body)


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
        message = missed["status"]["message"]
        assert "was claimed on shard Lease" in message and "no run record appeared" in message
        warning = poll(
            lambda: mentions(kube_api, namespace, tick), timeout=5, what="announced by an Event"
        )
        assert warning[0].type == "Warning"
        assert "no run record appeared" in warning[0].message
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


def test_runs_whose_records_take_seconds_to_write_raise_no_missed_run_alarm(
    kube: Kube,
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    """Every JobRun create takes 4 s (the API server under load): the records of runs that
    started on time arrive after startingDeadline, and the operator, which reads the claim
    from the shard Lease, gives them the run-record grace instead of alarming."""
    capture = CapturingHandler()
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register("work", capture)
    spec = {
        "schedule": "@every 2s",
        "startingDeadline": "1s",
        "handler": "work",
        "history": {"succeeded": 100, "failed": 100},
    }
    fault_plan(kube).add(Fault(verb="create", resource="jobruns", action="delay", seconds=4))
    with start_operator(extra_args=["--run-record-grace=10s"]):
        apply_job(kube_api, namespace, "slow-records", **spec)
        scheduler.start()
        try:
            assert capture.wait_calls(5, timeout=60)
            ran = {ctx.tick for ctx in capture.contexts}
            poll(
                lambda: all(run_of_job(kube_api, namespace, "slow-records", t) for t in ran),
                timeout=60,
                what="every run recorded",
            )
        finally:
            scheduler.stop()
        alarms = [e.message for e in events(kube_api, namespace, "MissedRun")]
        assert not [m for m in alarms if any(format_tick(t) in m for t in ran)], alarms
    recorded = {
        r["spec"]["tick"]: r["status"]["outcome"]
        for r in jobruns(kube_api, namespace)
        if r["spec"]["job"] == "slow-records"
    }
    assert all(recorded[format_tick(t)] == "Succeeded" for t in ran), recorded


def run_of_job(api: ApiClient, namespace: str, job: str, tick: datetime) -> bool:
    name = jobrun_name(job, tick)
    found = [r for r in jobruns(api, namespace) if r["metadata"]["name"] == name]
    return bool(found) and found[0]["status"].get("outcome") not in (None, "Running")
