"""Run requests against the real API server: `leasecron run` picked up by exactly one of
several replica Schedulers under a new shard claim, its refusals (no live replica with the
handler, suspended, single-owner, RBAC), `suspend`/`resume`, `backfill` (dry run, each
missing tick once in order, nothing the second time) and the operator finishing a request
nobody picked up as Missed."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from kubernetes import client
from operator_helpers import StartOperator, poll

from leasecron import Scheduler
from leasecron.cli import kubectl_plugin, main
from leasecron.kube.clients import Kube
from leasecron.kube.transports import Request, Send
from leasecron.models.names import GROUP, JOBRUN_PLURAL, SCHEDULEDJOB_PLURAL, VERSION, jobrun_name
from leasecron.models.requests import request_body
from leasecron.models.schedules import Schedule
from leasecron.models.specs import Trigger
from leasecron.runtime import Tuning
from leasecron.testing import ClusterAccess, Fault, create_serviceaccount, fault_plan
from leasecron.testing.handlers import CapturingHandler, run_tick_sync, scheduled_job

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)
YEARLY = "0 0 1 1 *"
NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")


def cli(kubeconfig: Path, namespace: str, *args: str, plugin: bool = False) -> Result:
    command = kubectl_plugin if plugin else main
    options = [*args, "--kubeconfig", str(kubeconfig), "-n", namespace]
    return CliRunner().invoke(command, options)


def said(result: Result) -> list[str]:
    """The command's own lines (the replicas in this process log to the same stdout)."""
    return [line for line in result.stdout.splitlines() if not LOG_LINE.match(line)]


def whoami(api: Any) -> str:
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    return str(review.status.user_info.username)


def objects(api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def jobrun(api: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = objects(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL, name
    )
    return found


@contextlib.contextmanager
def replicas(
    kubeconfig: Path, namespace: str, capture: CapturingHandler, *, count: int, handler: str
) -> Iterator[list[Scheduler]]:
    """`count` running Schedulers, each with its own client and identity, `handler` registered."""
    kubes = [Kube.from_config(kubeconfig=str(kubeconfig)) for _ in range(count)]
    schedulers = []
    try:
        for index, kube in enumerate(kubes):
            scheduler = Scheduler(
                namespace=namespace, kube=kube, tuning=FAST, grace_period=5, identity=f"r{index}"
            )
            scheduler.register(handler, capture)
            scheduler.start()
            schedulers.append(scheduler)
        yield schedulers
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        for kube in kubes:
            kube.api_client.rest_client.close()


def settled(schedulers: list[Scheduler], name: str) -> bool:
    """Every replica saw request `name` finished and has no pickup of it going."""
    pickups = [s._runtime.requests if s._runtime else None for s in schedulers]
    return all(p is not None and p.settled(name) for p in pickups)


@pytest.fixture
def yearly(kube: Kube, namespace: str) -> tuple[str, int]:
    """A once-per-tick job `yearly` whose scheduled tick NEW_YEAR ran (in this process): its
    name and the token of that run."""
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST)
    scheduler.register("yearly", lambda ctx: None)
    result = run_tick_sync(scheduler, scheduled_job("yearly", schedule=YEARLY), tick=NEW_YEAR)
    assert result.outcome == "Succeeded" and result.context.token is not None
    return "yearly", result.context.token


def test_run_now_runs_once_on_one_of_three_replicas_recorded_manual_with_a_higher_token(
    kubeconfig: Path, kube_api: Any, namespace: str, yearly: tuple[str, int]
) -> None:
    job, scheduled_token = yearly
    capture = CapturingHandler()
    with replicas(kubeconfig, namespace, capture, count=3, handler=job) as schedulers:
        result = cli(kubeconfig, namespace, "run", job, "--wait", "--timeout", "30")
        assert result.exit_code == 0, result.output
        requested, finished = said(result)
        name = requested.split()[0].removeprefix("jobrun/")
        poll(lambda: settled(schedulers, name), timeout=30, what="every replica done with it")
        identities = {s.identity for s in schedulers}
    assert capture.calls == 1
    [ctx] = capture.contexts
    run = jobrun(kube_api, namespace, name)
    spec, status = run["spec"], run["status"]
    assert name == jobrun_name(job, ctx.tick)
    assert spec["trigger"] == "Manual" and spec["requestedBy"] == whoami(kube_api)
    assert spec["holder"] == ctx.holder and spec["holder"] in identities
    assert spec["fencingToken"] == ctx.token and ctx.token is not None
    assert ctx.token > scheduled_token
    assert status["outcome"] == "Succeeded"
    assert run["metadata"]["labels"]["leasecron.dev/trigger"] == "Manual"
    assert run["metadata"]["ownerReferences"][0]["name"] == job
    assert finished == f"{name}: Succeeded (holder {ctx.holder}, token {ctx.token})"


def test_run_is_refused_when_no_live_replica_registered_the_handler(
    kubeconfig: Path, kube_api: Any, namespace: str, yearly: tuple[str, int]
) -> None:
    job, _ = yearly
    with replicas(kubeconfig, namespace, CapturingHandler(), count=1, handler="other"):
        result = cli(kubeconfig, namespace, "run", job, plugin=True)
    assert result.exit_code == 1
    assert "no live replica of group default" in result.output
    assert "registered handler yearly" in result.output
    listed = objects(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL
    )
    assert [r["spec"].get("trigger") for r in listed["items"]] == [None]  # only the scheduled run


def test_a_suspended_job_is_refused_unless_forced_and_suspend_and_resume_switch_it(
    kubeconfig: Path, kube_api: Any, namespace: str, yearly: tuple[str, int]
) -> None:
    job, _ = yearly
    capture = CapturingHandler()
    with replicas(kubeconfig, namespace, capture, count=1, handler=job):
        suspended = cli(kubeconfig, namespace, "suspend", job)
        assert suspended.exit_code == 0 and said(suspended) == [f"scheduledjob/{job} suspended"]
        refused = cli(kubeconfig, namespace, "run", job)
        assert refused.exit_code == 1 and f"{job} is suspended" in refused.output
        forced = cli(kubeconfig, namespace, "run", job, "--force", "--wait", "--timeout", "30")
        assert forced.exit_code == 0, forced.output
        assert "Succeeded" in forced.stdout
        resumed = cli(kubeconfig, namespace, "resume", job, plugin=True)
        assert resumed.exit_code == 0 and said(resumed) == [f"scheduledjob/{job} resumed"]
        again = cli(kubeconfig, namespace, "resume", job)
        assert said(again) == [f"scheduledjob/{job} was resumed already"]
    assert capture.calls == 1
    obj = objects(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, job
    )
    assert obj["spec"]["suspend"] is False


def test_a_single_owner_job_is_refused_with_what_it_does_instead(
    kubeconfig: Path, kube_api: Any, namespace: str, kube: Kube
) -> None:
    objects(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        SCHEDULEDJOB_PLURAL,
        scheduled_job("poller", bucket="single-owner"),
    )
    result = cli(kubeconfig, namespace, "run", "poller")
    assert result.exit_code == 1
    assert (
        "poller is single-owner" in result.output and "another replica takes over" in result.output
    )
    missing = cli(kubeconfig, namespace, "run", "nothing-here")
    assert missing.exit_code == 1
    assert f"ScheduledJob nothing-here not found in namespace {namespace}" in missing.output


def test_run_without_rbac_to_create_jobruns_names_the_verb_the_resource_and_the_namespace(
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    controlplane: ClusterAccess,
    yearly: tuple[str, int],
) -> None:
    job, _ = yearly
    reader = [
        {
            "apiGroups": ["leasecron.dev"],
            "resources": ["scheduledjobs", "jobruns"],
            "verbs": ["get", "list"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]},
    ]
    create_serviceaccount(kube_api, namespace=namespace, name="viewer", rules=reader)
    token = controlplane.mint_token(namespace=namespace, service_account="viewer")
    viewer = controlplane.kubeconfig_for_token(token=token, name=f"{namespace}-viewer")
    capture = CapturingHandler()
    with replicas(kubeconfig, namespace, capture, count=1, handler=job):
        result = cli(viewer, namespace, "run", job)
    assert result.exit_code == 1
    user = f"system:serviceaccount:{namespace}:viewer"
    assert f"{user} may not create jobruns.leasecron.dev in namespace {namespace}" in result.output
    assert capture.calls == 0


def create_run(api: Any, namespace: str, job_uid: str, name: str, **fields: Any) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobRun",
        "metadata": {
            "name": name,
            "labels": {"leasecron.dev/job": "hourly"},
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ScheduledJob",
                    "name": "hourly",
                    "uid": job_uid,
                }
            ],
        },
        **fields,
    }
    objects(api).create_namespaced_custom_object(GROUP, VERSION, namespace, JOBRUN_PLURAL, body)


def test_backfill_runs_each_tick_without_a_run_once_in_order_and_nothing_the_second_time(
    kubeconfig: Path, kube_api: Any, namespace: str, kube: Kube
) -> None:
    created = objects(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        SCHEDULEDJOB_PLURAL,
        scheduled_job("hourly", schedule="0 * * * *"),
    )
    uid = created["metadata"]["uid"]
    ran = datetime(2026, 1, 1, 1, tzinfo=UTC)
    missed = datetime(2026, 1, 1, 2, tzinfo=UTC)
    create_run(
        kube_api,
        namespace,
        uid,
        jobrun_name("hourly", ran),
        spec={"job": "hourly", "tick": "2026-01-01T01:00:00Z", "holder": "old", "fencingToken": 1},
        status={"outcome": "Succeeded"},
    )
    create_run(
        kube_api,
        namespace,
        uid,
        jobrun_name("hourly", missed),
        spec={"job": "hourly", "tick": "2026-01-01T02:00:00Z"},
        status={"outcome": "Missed", "message": "no replica started this tick"},
    )
    window = ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z")
    dry = cli(kubeconfig, namespace, "backfill", "hourly", *window, "--dry-run", plugin=True)
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == [
        "3 tick(s) of hourly to run:",
        "2026-01-01T00:00:00Z",
        "2026-01-01T02:00:00Z  (replaces its Missed record)",
        "2026-01-01T03:00:00Z",
        "1 tick(s) in the range have a run on record:",
        "  2026-01-01T01:00:00Z Succeeded",
    ]
    capture = CapturingHandler()
    with replicas(kubeconfig, namespace, capture, count=2, handler="hourly"):
        first = cli(kubeconfig, namespace, "backfill", "hourly", *window, "--throttle", "0s")
        assert first.exit_code == 0, first.output
        calls = capture.calls
        second = cli(kubeconfig, namespace, "backfill", "hourly", *window)
        assert second.exit_code == 0, second.output
    assert said(second)[0] == "0 tick(s) of hourly to run, 4 on record"
    ticks = [ctx.tick for ctx in capture.contexts if ctx.tick.year == 2026 and ctx.tick.month == 1]
    assert ticks == [datetime(2026, 1, 1, h, tzinfo=UTC) for h in (0, 2, 3)]
    assert capture.calls == calls
    tokens = [ctx.token for ctx in capture.contexts[:3]]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    for ctx in capture.contexts[:3]:
        run = jobrun(kube_api, namespace, jobrun_name("hourly", ctx.tick))
        assert run["spec"]["trigger"] == "Backfill" and run["spec"]["requestedBy"] == whoami(
            kube_api
        )
        assert run["status"]["outcome"] == "Succeeded" and run["spec"]["fencingToken"] == ctx.token


def test_the_operator_finishes_a_request_nobody_picked_up_as_missed(
    kube_api: Any, namespace: str, start_operator: StartOperator
) -> None:
    created = objects(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        SCHEDULEDJOB_PLURAL,
        scheduled_job("lonely", schedule=YEARLY, startingDeadline="2s"),
    )
    tick = datetime.now(UTC).replace(microsecond=0)
    body = request_body(
        job="lonely",
        job_uid=created["metadata"]["uid"],
        namespace=namespace,
        tick=tick,
        trigger=Trigger.MANUAL,
        requested_by="someone",
    )
    with start_operator():
        objects(kube_api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, JOBRUN_PLURAL, body
        )
        name = body["metadata"]["name"]

        def expired() -> dict[str, Any] | None:
            run = jobrun(kube_api, namespace, name)
            return run if run["status"].get("outcome") != "Pending" else None

        run = poll(expired, timeout=30, what="the request finished")
    assert run["status"]["outcome"] == "Missed"
    assert run["status"]["message"] == (
        "No live replica with handler lonely picked up this Manual request within "
        "startingDeadline 2s."
    )
    assert not run["spec"]["holder"]


LOST_PICKUP = Fault(verb="patch", resource="jobruns", action="lose_reply", times=1)


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param([LOST_PICKUP], id="the pickup's reply lost: read back"),
        pytest.param(
            [LOST_PICKUP, Fault(verb="get", resource="jobruns", action="fail", times=6)],
            id="and its read-backs refused: read until the store answers",
        ),
        pytest.param(
            [Fault(verb="patch", resource="jobruns", action="fail", after=1, times=1)],
            id="the outcome's patch refused: written later, never left Running",
        ),
    ],
)
def test_a_request_whose_writes_meet_faults_runs_once_and_is_recorded_succeeded(
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    yearly: tuple[str, int],
    faults: list[Fault],
) -> None:
    job, _ = yearly
    capture = CapturingHandler()
    with replicas(kubeconfig, namespace, capture, count=1, handler=job) as [replica]:
        assert replica.kube is not None
        plan = fault_plan(replica.kube)
        with contextlib.ExitStack() as stack:
            rules = [stack.enter_context(plan.injected(fault)) for fault in faults]
            result = cli(kubeconfig, namespace, "run", job, "--wait", "--timeout", "40")
        assert result.exit_code == 0, result.output
        assert [rule.hits for rule in rules] == [fault.times for fault in faults]
    assert capture.calls == 1
    [ctx] = capture.contexts
    run = jobrun(kube_api, namespace, jobrun_name(job, ctx.tick))
    assert run["spec"]["holder"] == replica.identity and run["spec"]["fencingToken"] == ctx.token
    assert run["status"]["outcome"] == "Succeeded"


def test_requests_never_take_a_shard_mates_tick_that_is_due_and_not_claimed_yet(
    kube_api: Any, namespace: str, kubes: list[Kube]
) -> None:
    """One shard for both jobs; the scheduled job's replica is a little slow to write its
    claims. Requests made just after each of its ticks wait for that tick to be claimed
    instead of claiming past it (which would take the tick from the only replica that can
    run it)."""
    on_demand = objects(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        SCHEDULEDJOB_PLURAL,
        scheduled_job("on-demand", schedule=YEARLY),
    )
    objects(kube_api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        SCHEDULEDJOB_PLURAL,
        scheduled_job("every-two", schedule="@every 2s", startingDeadline="1500ms"),
    )
    slow, quick = kubes[:2]

    def late_lease_writes(request: Request, send: Send) -> Any:
        if request.write and request.resource.startswith("leases"):
            time.sleep(0.4)
        return send()

    slow.wrap_transport(late_lease_writes)
    scheduled, requested = CapturingHandler(), CapturingHandler()
    runs = Scheduler(namespace=namespace, kube=slow, tuning=FAST, shards=1)
    runs.register("every-two", scheduled)
    asks = Scheduler(namespace=namespace, kube=quick, tuning=FAST, shards=1)
    asks.register("on-demand", requested)
    with contextlib.ExitStack() as stack:
        for scheduler in (runs, asks):
            scheduler.start()
            stack.callback(scheduler.stop)
        assert scheduled.wait_calls(1)
        for _ in range(6):
            now = time.time()
            time.sleep(2 - now % 2 + 0.05)  # just after a tick of every-two
            body = request_body(
                job="on-demand",
                job_uid=on_demand["metadata"]["uid"],
                namespace=namespace,
                tick=datetime.now(UTC).replace(microsecond=0),
                trigger=Trigger.MANUAL,
                requested_by="test",
            )
            objects(kube_api).create_namespaced_custom_object(
                GROUP, VERSION, namespace, JOBRUN_PLURAL, body
            )
        assert requested.wait_calls(6)
        last = datetime.now(UTC)
        time.sleep(2.5)  # the tick after the last request has come and had time to run
    ticks = sorted(ctx.tick for ctx in scheduled.contexts)
    expected = Schedule.parse("@every 2s").ticks_between(ticks[0], last, limit=100)
    assert len(expected) >= 6
    assert [t for t in expected if t not in ticks] == []
    assert len(set(ticks)) == len(ticks)
