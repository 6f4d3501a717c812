"""Several schedulers of one group (in one process, as separate replicas): once-per-tick jobs
with `coordination: Leader` run on the group's leader only and move with the leadership, and
single-owner jobs go to their rendezvous-preferred replica, spreading over the replicas instead
of piling onto the first."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.decisions import rendezvous_rank
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.handlers import CapturingHandler, scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)
ELECTION = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}


@pytest.fixture
def replicas(kube: Kube, namespace: str) -> Iterator[list[Scheduler]]:
    made = [
        Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5, identity=f"r{i}")
        for i in range(3)
    ]
    yield made
    for scheduler in made:
        scheduler.stop()


def wait_members(api: Any, namespace: str, count: int) -> None:
    leases = client.CoordinationV1Api(api)
    deadline = time.monotonic() + 30
    selector = "leasecron.dev/role=member"
    while len(leases.list_namespaced_lease(namespace, label_selector=selector).items) < count:
        assert time.monotonic() < deadline, "members did not show up"
        time.sleep(0.05)


def test_leader_coordinated_ticks_run_on_the_group_leader_and_follow_it(
    replicas: list[Scheduler], kube_api: Any, namespace: str
) -> None:
    capture = CapturingHandler()
    a, b = replicas[:2]
    for scheduler in (a, b):
        scheduler.register("led", capture)
    manifest = scheduled_job("led", coordination="Leader", election=ELECTION)
    apply_manifests(kube_api, [manifest], namespace=namespace)
    a.start()
    b.start()
    assert capture.wait_calls(3)
    first = {ctx.holder for ctx in capture.contexts}
    assert len(first) == 1
    leader = a if a.identity in first else b
    leader.stop()
    before = capture.calls
    assert capture.wait_calls(before + 3)
    after = capture.contexts[before:]
    follower = b if leader is a else a
    assert {ctx.holder for ctx in after[1:]} == {follower.identity}
    assert max(c.token or 0 for c in after) > max(c.token or 0 for c in capture.contexts[:before])
    ticks = [ctx.tick for ctx in capture.contexts]
    assert len(ticks) == len(set(ticks)), "a tick ran twice"
    runs = wait_for_jobruns(
        kube_api, namespace=namespace, until=lambda items: len(items) >= capture.calls
    )
    assert {r["spec"]["holder"] for r in runs} == {a.identity, b.identity}


def test_single_owner_jobs_go_to_their_rendezvous_preferred_replica(
    replicas: list[Scheduler], kube_api: Any, namespace: str
) -> None:
    owners: dict[str, str] = {}
    changed = threading.Condition()

    async def own(ctx: JobContext) -> None:
        with changed:
            owners[ctx.job] = ctx.holder
            changed.notify_all()
        await asyncio.Event().wait()

    names = [f"sweeper-{i}" for i in range(6)]
    for scheduler in replicas:
        for name in names:
            scheduler.register(name, own)
        scheduler.start()
    wait_members(kube_api, namespace, 3)
    jobs = [scheduled_job(name, bucket="single-owner", election=ELECTION) for name in names]
    apply_manifests(kube_api, jobs, namespace=namespace)
    with changed:
        assert changed.wait_for(lambda: len(owners) == len(names), timeout=30)
    print(f"\nowners: {dict(sorted(owners.items()))}")
    # With all three members live, each job's owner is its rendezvous-preferred replica: the
    # others wait rank * 0.5 s before contending and by then see the Lease taken.
    identities = [scheduler.identity for scheduler in replicas]
    preferred = {
        name: next(i for i in identities if rendezvous_rank(name, i, identities) == 0)
        for name in names
    }
    assert owners == preferred
    assert len(set(preferred.values())) == 3  # these six names do spread over all three
