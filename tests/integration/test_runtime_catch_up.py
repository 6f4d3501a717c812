"""Catch-up and startingDeadline (docs/design.md §5.6) against a real API server. A replica
whose wall clock is ahead stands for "time passed while no replica ran": the ticks between
the job's creation and its first claim were missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import CoordinationV1Api

from leasecron import Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.clocks import SystemClock
from leasecron.models.names import (
    GROUP,
    JOBRUN_PLURAL,
    LABEL_ROLE,
    VERSION,
    jobrun_name,
    parse_tick,
)
from leasecron.models.schedules import Schedule
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.faults import Fault, fault_plan
from leasecron.testing.handlers import CapturingHandler, scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, store_time=False)
"""The replica's own clock, as it is: a clock ahead stands for time that passed."""


def outcomes(items: list[dict[str, Any]]) -> dict[str, str]:
    return {i["metadata"]["name"]: (i.get("status") or {}).get("outcome", "") for i in items}


def created(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def _start_ahead(
    kube: Kube, kube_api: Any, namespace: str, capture: CapturingHandler, *, policy: str
) -> tuple[dict[str, Any], Scheduler]:
    """The job `@every 1s` (startingDeadline 1 s, catch-up `policy` with maxTicks 2) and a
    started Scheduler running it with `capture`, its clock 8 s ahead."""
    manifest = scheduled_job(
        "job",
        schedule="@every 1s",
        startingDeadline="1s",
        catchUp={"policy": policy, "maxTicks": 2},
    )
    [job] = apply_manifests(kube_api, [manifest], namespace=namespace)
    clock = SystemClock(skew=timedelta(seconds=8))
    scheduler = Scheduler(namespace=namespace, kube=kube, clock=clock, tuning=FAST)
    scheduler.register("job", capture)
    scheduler.start()
    return job, scheduler


@pytest.mark.parametrize(
    ("policy", "runs_missed", "failed_reads"), [("All", 2, 0), ("None", 0, 0), ("All", 2, 2)]
)
def test_missed_ticks_are_run_per_catch_up_policy_and_the_rest_recorded_missed(
    kube: Kube, kube_api: Any, namespace: str, policy: str, runs_missed: int, failed_reads: int
) -> None:
    """With `failed_reads`, the first claim's reads of the job's JobRuns (what its catch-up
    is planned from on a new shard Lease) fail that many times first, as on a busy server."""
    if failed_reads:
        fault_plan(kube).add(
            Fault(verb="list", resource="jobruns", action="fail", times=failed_reads)
        )
    capture = CapturingHandler()
    job, scheduler = _start_ahead(kube, kube_api, namespace, capture, policy=policy)
    try:
        assert capture.wait_calls(runs_missed + 1)
        newest = capture.contexts[0].tick  # the first claim's instant is at or before it
        every = Schedule.parse("@every 1s").ticks_between(created(job), newest, limit=100)
        names = {jobrun_name("job", tick) for tick in every}
        runs = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            until=lambda items: (
                names <= {n for n, o in outcomes(items).items() if o not in ("", "Running")}
            ),
        )
    finally:
        scheduler.stop()
    # Every tick since the job's creation is recorded under the first claim's token: its
    # instant (the newest of them), the catch-up runs and the Missed rest.
    first = min(ctx.token for ctx in capture.contexts if ctx.token is not None)
    claimed_with = sorted(
        parse_tick(r["spec"]["tick"]) for r in runs if r["spec"].get("fencingToken") == first
    )
    instant, between = claimed_with[-1], claimed_with[:-1]
    assert between == every[: len(between)] and len(between) >= 5, claimed_with
    caught_up = between[len(between) - runs_missed :]
    seen = outcomes(runs)
    for tick in between[: len(between) - runs_missed]:
        assert seen[jobrun_name("job", tick)] == "Missed"
    for tick in caught_up:
        assert seen[jobrun_name("job", tick)] == "Succeeded"
    # The claimed instant runs first (it has a deadline to keep), then the catch-up runs; on
    # a loaded machine it may have been too late to start (recorded Missed, as the next test
    # makes it), and the catch-up runs planned with it still run.
    ran = [ctx.tick for ctx in capture.contexts if ctx.token == first]
    if seen[jobrun_name("job", instant)] == "Succeeded":
        assert ran == [instant, *caught_up]
    else:
        assert seen[jobrun_name("job", instant)] == "Missed" and ran == caught_up
    assert sum(rule.hits for rule in fault_plan(kube).rules) == failed_reads


def test_a_claimed_tick_that_cannot_start_in_time_still_runs_the_catch_up_planned_with_it(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """The first claim's read of the job's JobRuns (a new shard Lease's catch-up is planned
    from them) takes 1.5 s, as on a busy server: the claimed tick (startingDeadline 1 s) is
    recorded Missed, and the two catch-up runs planned with it still run. Every tick since
    the job's creation is run or recorded."""
    fault_plan(kube).add(Fault(verb="list", resource="jobruns", action="delay", seconds=1.5))
    capture = CapturingHandler()
    job, scheduler = _start_ahead(kube, kube_api, namespace, capture, policy="All")
    try:
        assert capture.wait_calls(4)
        newest = max(ctx.tick for ctx in capture.contexts)
        every = Schedule.parse("@every 1s").ticks_between(created(job), newest, limit=100)
        names = [jobrun_name("job", tick) for tick in every]
        runs = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            until=lambda items: (
                set(names) <= {n for n, o in outcomes(items).items() if o not in ("", "Running")}
            ),
        )
    finally:
        scheduler.stop()
    seen = outcomes(runs)
    order = [seen[name] for name in names]
    first_run = order.index("Succeeded")
    claimed = first_run + 2  # the claimed tick, after its two catch-up runs
    assert first_run >= 5 and set(order[:first_run]) == {"Missed"}, order
    assert order[first_run:claimed] == ["Succeeded", "Succeeded"], order
    assert order[claimed] == "Missed", order


def _skew_to_mid_period(period: int) -> timedelta:
    """A skew that puts the replica's clock half a period after a tick of `@every period`."""
    now = datetime.now(UTC).timestamp()
    target = (now // period + 1) * period + period / 2 + 2 * period
    return timedelta(seconds=target - now)


@pytest.mark.parametrize("policy", ["Latest", "None"])
def test_a_tick_past_its_starting_deadline_starts_only_as_a_latest_catch_up(
    kube: Kube, kube_api: Any, namespace: str, policy: str
) -> None:
    capture = CapturingHandler()
    manifest = scheduled_job(
        "job", schedule="@every 6s", startingDeadline="1s", catchUp={"policy": policy}
    )
    apply_manifests(kube_api, [manifest], namespace=namespace)
    clock = SystemClock(skew=_skew_to_mid_period(6))
    scheduler = Scheduler(namespace=namespace, kube=kube, clock=clock, tuning=FAST)
    scheduler.register("job", capture)
    started = clock.now()
    scheduler.start()
    try:
        assert capture.wait_calls(1, timeout=30)
        first = capture.contexts[0].tick
        latest = Schedule.parse("@every 6s").latest_at_or_before(started)
        assert latest is not None and started - latest > timedelta(seconds=1)
        if policy == "Latest":
            assert first == latest  # run at once although 3 s past its deadline
        else:
            assert first > started  # nobody starts it; the next tick runs on time
            runs = wait_for_jobruns(
                kube_api,
                namespace=namespace,
                until=lambda items: jobrun_name("job", latest) in outcomes(items),
            )
            assert outcomes(runs)[jobrun_name("job", latest)] == "Missed"
    finally:
        scheduler.stop()


def _newest_run_only(kube_api: Any, namespace: str, jobs: list[str]) -> None:
    """Delete every JobRun but each job's newest, as `spec.history` of 1 would."""
    api = client.CustomObjectsApi(kube_api)
    listed = api.list_namespaced_custom_object(GROUP, VERSION, namespace, JOBRUN_PLURAL)
    for job in jobs:
        runs = sorted(
            (i for i in listed["items"] if i["spec"]["job"] == job),
            key=lambda i: i["spec"]["tick"],
        )
        for run in runs[:-1]:
            api.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, JOBRUN_PLURAL, run["metadata"]["name"]
            )


def test_a_new_shard_lease_plans_catch_up_from_the_jobs_last_run_not_from_its_creation(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    jobs = ["invoices", "reports", "reminders"]
    manifests = [
        scheduled_job(
            name,
            schedule="@every 1s",
            startingDeadline="1s",
            catchUp={"policy": "All", "maxTicks": 10},
        )
        for name in jobs
    ]
    apply_manifests(kube_api, manifests, namespace=namespace)
    before, after = CapturingHandler(), CapturingHandler()
    for capture in (before, after):
        scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST)
        for name in jobs:
            scheduler.register(name, capture)
        scheduler.start()
        try:
            assert capture.wait_calls(len(jobs) * 4)
        finally:
            scheduler.stop()
        if capture is before:
            wait_for_jobruns(
                kube_api,
                namespace=namespace,
                until=lambda items: len(items) >= before.calls,
            )
            # Records pruned to the newest, then the shard Lease goes: the next claim
            # creates it again and replaces no instant.
            _newest_run_only(kube_api, namespace, jobs)
            CoordinationV1Api(kube_api).delete_collection_namespaced_lease(
                namespace, label_selector=f"{LABEL_ROLE}=shard"
            )
    last = {name: max(c.tick for c in before.contexts if c.job == name) for name in jobs}
    again = [(c.job, c.tick) for c in after.contexts if c.tick <= last[c.job]]
    assert again == []  # no tick that ran runs twice
    listed = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL
    )
    false_alarms = [
        i["metadata"]["name"]
        for i in listed["items"]
        if (i.get("status") or {}).get("outcome") == "Missed"
        and parse_tick(i["spec"]["tick"]) <= last[i["spec"]["job"]]
    ]
    assert false_alarms == []  # nor is a tick that ran recorded Missed
