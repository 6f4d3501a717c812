"""Several schedulers of one group (in one process, as separate replicas): the once-per-tick
jobs of a group with one shard (one claim per instant for all of them) go on when the replica
that claimed them stops, with a growing token, and single-owner jobs go to their
rendezvous-preferred replica, spreading over the replicas instead of piling onto the first."""

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
from leasecron.testing.handlers import CapturingHandler, scheduled_job

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


def test_a_one_shard_group_claims_each_instant_once_and_goes_on_when_a_replica_stops(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    capture = CapturingHandler()
    a, b = (
        Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5, shards=1)
        for _ in range(2)
    )
    for scheduler in (a, b):
        scheduler.register("led", capture)
    manifests = [scheduled_job(name, handler="led") for name in ("led-a", "led-b")]
    apply_manifests(kube_api, manifests, namespace=namespace)
    a.start()
    b.start()
    try:
        assert capture.wait_calls(6)
        # One claim per instant: both jobs due at one instant run under one token.
        tokens: dict[Any, set[int | None]] = {}
        for ctx in list(capture.contexts):
            tokens.setdefault(ctx.tick, set()).add(ctx.token)
        assert all(len(t) == 1 for t in tokens.values()), tokens
        first = capture.contexts[0].holder
        stopped = a if a.identity == first else b
        stopped.stop()
        before = capture.calls
        assert capture.wait_calls(before + 6)
    finally:
        a.stop()
        b.stop()
    after = capture.contexts[before:]
    survivor = b if stopped is a else a
    assert {ctx.holder for ctx in after[2:]} == {survivor.identity}
    assert max(c.token or 0 for c in after) > max(c.token or 0 for c in capture.contexts[:before])
    ticks = [(ctx.job, ctx.tick) for ctx in capture.contexts]
    assert len(ticks) == len(set(ticks)), "a tick ran twice"


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
