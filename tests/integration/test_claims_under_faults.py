"""The claim path under request-level faults against the real API server (issue: partial
failures): a claim whose reply is lost, one failed request, a store that is out of reach for
a while with `onStoreUnavailable: RunLocally`, and what is already known about a tick."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api, CustomObjectsApi
from prometheus_client import REGISTRY

from leasecron import JobContext, Scheduler
from leasecron.coordination import Elector, lease_informer
from leasecron.coordination.shards import shard_labels
from leasecron.kube.clients import Kube
from leasecron.models.configs import ElectionConfig
from leasecron.models.groups import shard_ref
from leasecron.models.names import GROUP, JOBRUN_PLURAL, VERSION, jobrun_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests, poll
from leasecron.testing.faults import Fault, fault_plan
from leasecron.testing.handlers import CapturingHandler, scheduled_job

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, unguarded_after=1.0)


@pytest.fixture
def kube(kubeconfig: Path, leasecron_crds: list[str]) -> Iterator[Kube]:
    made = Kube.from_config(kubeconfig=str(kubeconfig), request_timeout=3.0)
    yield made
    made.api_client.rest_client.close()


def _scheduler(kube: Kube, namespace: str, name: str, handler: CapturingHandler) -> Scheduler:
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register(name, handler)
    return scheduler


def _shard_lease(job: str) -> str:
    """The shard Lease that claims `job`'s ticks (a new group records DEFAULT_SHARDS)."""
    return shard_ref("default", job, shards=DEFAULT_SHARDS).lease


def _jobruns(kube_api: ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    listed = CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL
    )
    return {item["metadata"]["name"]: item for item in listed["items"]}


def _ticks(contexts: list[JobContext]) -> list[datetime]:
    return [ctx.tick for ctx in contexts]


def _unaccounted(
    kube_api: ApiClient, namespace: str, job: str, ticks: list[datetime]
) -> list[datetime]:
    """Ticks between the first and the last run that neither ran nor were recorded (a tick
    that could not start in time, e.g. on a loaded machine, must at least be a Missed run)."""
    if not ticks:
        return []
    runs = _jobruns(kube_api, namespace)
    first, last = min(ticks), max(ticks)
    span = int((last - first).total_seconds())
    every = [first + timedelta(seconds=i) for i in range(span + 1)]
    return [t for t in every if t not in ticks and jobrun_name(job, t) not in runs]


@pytest.mark.parametrize("read_back", ["answers", "fails"])
def test_a_claim_whose_reply_is_lost_still_runs_its_tick_and_the_job_goes_on(
    kube: Kube, kube_api: ApiClient, namespace: str, read_back: str
) -> None:
    lease = _shard_lease("lost-reply")
    # The first claim writes the job's shard Lease (made with the group record); its reply is
    # lost, the write lands.
    fault_plan(kube).add(
        Fault(verb="update", resource="leases", name=lease, action="lose_reply", times=1)
    )
    if read_back == "fails":
        # ... and the GET that reads it back fails too: the claim is uncertain, and the
        # replica must recognise its own grant when the watch shows it.
        fault_plan(kube).add(
            Fault(verb="get", resource="leases", name=lease, action="fail", times=1)
        )
    apply_manifests(kube_api, [scheduled_job("lost-reply")], namespace=namespace)
    handler = CapturingHandler()
    scheduler = _scheduler(kube, namespace, "lost-reply", handler)
    scheduler.start()
    try:
        assert handler.wait_calls(4, timeout=20), "the job stalled behind its own lost claim"
    finally:
        scheduler.stop()
    assert sum(rule.hits for rule in fault_plan(kube).rules) == (1 if read_back == "answers" else 2)
    ticks = _ticks(handler.contexts)
    assert len(set(ticks)) == len(ticks), ticks
    assert not _unaccounted(kube_api, namespace, "lost-reply", ticks)
    first = CoordinationV1Api(kube_api).read_namespaced_lease(lease, namespace)
    assert first.spec.lease_transitions >= len(ticks)
    runs = _jobruns(kube_api, namespace)
    assert all(jobrun_name("lost-reply", tick) in runs for tick in ticks)


def test_one_failed_request_is_not_an_outage_for_run_locally(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    job = scheduled_job("flaky", onStoreUnavailable="RunLocally")
    apply_manifests(kube_api, [job], namespace=namespace)
    handler = CapturingHandler()
    scheduler = _scheduler(kube, namespace, "flaky", handler)
    scheduler.start()
    try:
        assert handler.wait_calls(2)
        # Half-way between two ticks the last run was released and the next claim is the
        # next write of the job's shard Lease: that claim is the one request that fails.
        time.sleep(1.5 - datetime.now().microsecond / 1e6 % 1.0)
        rule = fault_plan(kube).add(
            Fault(
                verb="update",
                resource="leases",
                name=_shard_lease("flaky"),
                action="status",
                status=503,
                times=1,
            )
        )
        before = handler.calls
        assert handler.wait_calls(before + 3)
    finally:
        scheduler.stop()
    assert rule.hits == 1
    assert not [ctx.tick for ctx in handler.contexts if ctx.unguarded]
    assert all(ctx.token is not None for ctx in handler.contexts)
    assert not _unaccounted(kube_api, namespace, "flaky", _ticks(handler.contexts))


def test_run_locally_never_runs_a_tick_while_another_replica_holds_the_job(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    """The watch on the Leases is broken, but what the replica knows (a live grant of another
    holder) says the job runs elsewhere: no unguarded run."""
    now = datetime.now().astimezone()
    CoordinationV1Api(kube_api).create_namespaced_lease(
        namespace,
        {
            "metadata": {
                "name": _shard_lease("held"),
                "labels": {
                    "leasecron.dev/role": "shard",
                    **shard_labels("default", shard_ref("default", "held", shards=DEFAULT_SHARDS)),
                },
            },
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 3600,
                "acquireTime": now.isoformat(timespec="microseconds"),
                "renewTime": now.isoformat(timespec="microseconds"),
                "leaseTransitions": 7,
            },
        },
    )
    fault_plan(kube).add(Fault(verb="watch", resource="leases", action="fail"))
    apply_manifests(
        kube_api,
        [scheduled_job("held", onStoreUnavailable="RunLocally", startingDeadline="2s")],
        namespace=namespace,
    )
    handler = CapturingHandler()
    scheduler = _scheduler(kube, namespace, "held", handler)
    scheduler.start()
    labels = {"job_namespace": namespace, "scheduled_job": "held", "reason": "live_grant"}

    def skipped() -> float:
        return REGISTRY.get_sample_value("leasecron_skips_total", labels) or 0.0

    try:
        poll(lambda: skipped() >= 5 or None, timeout=30, what="five ticks skipped as live_grant")
    finally:
        scheduler.stop()
    assert handler.calls == 0, [ctx.tick for ctx in handler.contexts]


def test_run_locally_does_not_run_a_tick_whose_run_is_already_on_record(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    """The job's shard Lease cannot be written (claims fail, the store is "out of reach" for them)
    and every other tick already has its JobRun: an AlreadyExists says someone ran it, so
    the handler must not run those; the ticks without a record run unguarded."""
    apply_manifests(
        kube_api, [scheduled_job("recorded", onStoreUnavailable="RunLocally")], namespace=namespace
    )
    api = CustomObjectsApi(kube_api)
    start = datetime.now().astimezone().replace(microsecond=0) + timedelta(seconds=3)
    recorded = {start + timedelta(seconds=offset) for offset in range(0, 12, 2)}
    for tick in recorded:
        api.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            JOBRUN_PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "JobRun",
                "metadata": {"name": jobrun_name("recorded", tick)},
                "spec": {"job": "recorded", "tick": tick.isoformat(), "holder": "elsewhere"},
                "status": {"outcome": "Succeeded"},
            },
        )
    lease = _shard_lease("recorded")
    for verb in ("create", "update"):
        fault_plan(kube).add(
            Fault(verb=verb, resource="leases", name=lease, action="status", status=503)
        )
    handler = CapturingHandler()
    scheduler = _scheduler(kube, namespace, "recorded", handler)
    scheduler.start()
    try:
        deadline = start + timedelta(seconds=12)
        while datetime.now().astimezone() < deadline:
            time.sleep(0.5)
    finally:
        scheduler.stop()
    window = {start + timedelta(seconds=offset) for offset in range(12)}
    ran = {ctx.tick for ctx in handler.contexts if ctx.tick in window}
    assert not ran & recorded, sorted(ran & recorded)
    assert len(ran - recorded) >= 2, sorted(ran)  # the others did run, unguarded
    assert all(ctx.unguarded for ctx in handler.contexts if ctx.tick in window)


def test_ticks_run_unguarded_in_an_outage_are_recorded_after_it_and_never_run_again(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    job = scheduled_job(
        "outage",
        onStoreUnavailable="RunLocally",
        catchUp={"policy": "All", "maxTicks": 10},
        startingDeadline="4s",
    )
    apply_manifests(kube_api, [job], namespace=namespace)
    handler = CapturingHandler()
    scheduler = _scheduler(kube, namespace, "outage", handler)
    scheduler.start()
    try:
        assert handler.wait_calls(2)
        rules = [
            fault_plan(kube).add(Fault(verb=verb, resource=resource, action="status", status=503))
            for verb in ("create", "update")
            for resource in ("leases", "jobruns")
        ]
        before = handler.calls
        assert handler.wait_calls(before + 4, timeout=30)
        outage = [ctx.tick for ctx in handler.contexts if ctx.unguarded]
        assert len(outage) >= 3
        for rule in rules:
            fault_plan(kube).remove(rule)
        healed = handler.calls
        assert handler.wait_calls(healed + 4, timeout=30)
    finally:
        scheduler.stop()
    ticks = _ticks(handler.contexts)
    assert len(set(ticks)) == len(ticks), sorted(t for t in set(ticks) if ticks.count(t) > 1)
    runs = _jobruns(kube_api, namespace)
    for tick in outage:
        record = runs.get(jobrun_name("outage", tick))
        assert record is not None, f"unguarded run of {tick} never recorded"
        assert record["status"]["outcome"] == "Unguarded", record["status"]


def test_an_elector_whose_acquire_reply_is_lost_leads_with_the_term_that_landed(
    kube_api: ApiClient, namespace: str
) -> None:
    """The create that takes the Lease lands but its reply is lost: the elector reads it back
    and leads with that term, instead of treating it as not written and taking a second one."""

    async def scenario() -> int:
        kube = Kube(kube_api, max_workers=4, request_timeout=3.0)
        fault_plan(kube).add(
            Fault(verb="create", resource="leases", name="leader", action="lose_reply", times=1)
        )
        informer = lease_informer(kube, namespace=namespace)
        await informer.start()
        config = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)
        elector = Elector(
            kube, informer, namespace=namespace, name="leader", config=config, identity="a"
        )
        try:
            elector.start()
            term = await elector.wait_leading(timeout=15)
            assert term is not None
            return term.token
        finally:
            await elector.stop()
            await informer.stop()

    assert asyncio.run(scenario()) == 0  # the term the lost create wrote, not a second one
