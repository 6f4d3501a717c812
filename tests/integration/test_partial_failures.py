"""Guarantees under partial failure, against the real API server: a stalled leader's term
ends by time, catch-up plans from the tick a claim actually replaced, a new group leader with
a clock behind never repeats a tick, and fencing tokens never go backwards when a job's Lease
is created again."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api, CustomObjectsApi

from leasecron import JobContext, Scheduler
from leasecron.coordination import (
    BackgroundLoop,
    Elector,
    Grant,
    LostLockError,
    Term,
    TickLock,
    lease_informer,
)
from leasecron.kube.clients import Kube
from leasecron.kube.watches import Informer
from leasecron.models.clocks import SystemClock
from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.models.groups import shard_ref
from leasecron.models.names import GROUP, JOBRUN_PLURAL, VERSION, job_lease_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.handlers import CapturingHandler, scheduled_job

pytestmark = pytest.mark.integration
ELECTION = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)
TICK = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def kube(kubeconfig: Path, leasecron_crds: list[str]) -> Iterator[Kube]:
    made = Kube.from_config(kubeconfig=str(kubeconfig), request_timeout=3.0)
    yield made
    made.api_client.rest_client.close()


async def _elector(kube_api: ApiClient, namespace: str, identity: str) -> tuple[Elector, Informer]:
    kube = Kube(kube_api, max_workers=4, request_timeout=2.0)
    informer = lease_informer(kube, namespace=namespace)
    await informer.start()
    elector = Elector(
        kube, informer, namespace=namespace, name="leader", config=ELECTION, identity=identity
    )
    elector.start()
    return elector, informer


async def _stop(elector: Elector, informer: Informer) -> None:
    await elector.stop(release=False)
    await informer.stop()


async def _stall(seconds: float) -> None:
    time.sleep(seconds)  # noqa: ASYNC251 - blocks the loop, as a long GC pause or a hung call would


def test_a_stalled_leader_no_longer_holds_its_term_once_renew_deadline_has_passed(
    kube_api: ApiClient, namespace: str
) -> None:
    with BackgroundLoop(name="a") as loop_a, BackgroundLoop(name="b") as loop_b:
        a, informer_a = loop_a.run(_elector(kube_api, namespace, "a"))
        term_a = loop_a.run(a.wait_leading(timeout=15))
        assert isinstance(term_a, Term) and term_a.held
        b, informer_b = loop_b.run(_elector(kube_api, namespace, "b"))
        stalled = loop_a.submit(_stall(ELECTION.lease_duration_s + 3.0))
        term_b = loop_b.run(b.wait_leading(timeout=30))
        assert term_b is not None and term_b.token > term_a.token
        # A's loop is still stalled: nothing in it could have noticed. The term's own time
        # bound (last renewal + renewDeadline on the monotonic clock) must say it is over.
        assert not stalled.done()
        with pytest.raises(LostLockError):
            term_a.assert_held()
        assert not term_a.held
        stalled.result(timeout=30)
        loop_b.run(_stop(b, informer_b))
        loop_a.run(_stop(a, informer_a))


def test_catch_up_plans_from_the_tick_the_claim_replaced_not_from_before_its_stagger(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[Grant | None, datetime]:
        kube = Kube(kube_api, max_workers=4, request_timeout=3.0)
        informer = lease_informer(kube, namespace=namespace)
        await informer.start()

        def lock(identity: str) -> TickLock:
            return TickLock(
                kube,
                informer,
                namespace=namespace,
                name="job",
                config=LockConfig(at_most_for=5),
                identity=identity,
            )

        first, late, quick = lock("first"), lock("late"), lock("quick")
        try:
            grant = await first.claim(TICK)
            assert grant is not None
            await grant.release()
            # "late" plans its claim of TICK+2 with a stagger; meanwhile "quick" claims TICK+1.
            pending = asyncio.ensure_future(late.claim(TICK + timedelta(minutes=2), stagger=1.0))
            await asyncio.sleep(0.2)
            taken = await quick.claim(TICK + timedelta(minutes=1))
            assert taken is not None
            await taken.release()
            return await pending, taken.tick
        finally:
            for each in (first, late, quick):
                await each.close()
            await informer.stop()

    grant, quick_tick = asyncio.run(scenario())
    assert grant is not None
    assert grant.replaced_tick == quick_tick
    assert not grant.replaced_unrun


def _jobruns(kube_api: ApiClient, namespace: str) -> list[dict[str, Any]]:
    listed = CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL
    )
    return list(listed["items"])


def _delete_jobruns(kube_api: ApiClient, namespace: str) -> None:
    api = CustomObjectsApi(kube_api)
    for item in _jobruns(kube_api, namespace):
        api.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, JOBRUN_PLURAL, item["metadata"]["name"]
        )


def test_a_replica_with_a_clock_behind_never_runs_a_tick_an_earlier_replica_ran(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    """The shard Lease's recorded instant (its high-water mark), not any run record, stops a
    replica whose clock runs late from running a tick again."""
    job = scheduled_job("leader-job", history={"succeeded": 0, "failed": 0})
    apply_manifests(kube_api, [job], namespace=namespace)
    first = CapturingHandler()
    old = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    old.register("leader-job", first)
    old.start()
    try:
        assert first.wait_calls(3)
    finally:
        old.stop()
    ran = {ctx.tick for ctx in first.contexts}
    # The JobRuns that would have deduplicated are gone (history 0 prunes them).
    _delete_jobruns(kube_api, namespace)
    second = CapturingHandler()
    behind = SystemClock(skew=timedelta(seconds=-6))
    own_clock = dataclasses.replace(FAST, store_time=False)  # not the API server's
    new = Scheduler(namespace=namespace, kube=kube, tuning=own_clock, grace_period=5, clock=behind)
    new.register("leader-job", second)
    new.start()
    try:
        assert second.wait_calls(2, timeout=30)
    finally:
        new.stop()
    again = {ctx.tick for ctx in second.contexts}
    assert not again & ran, sorted(again & ran)
    assert min(again) > max(ran)


def test_fencing_tokens_never_go_backwards_when_the_shard_lease_is_deleted(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    apply_manifests(kube_api, [scheduled_job("tokens")], namespace=namespace)
    handler = CapturingHandler()
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register("tokens", handler)
    scheduler.start()
    try:
        assert handler.wait_calls(3)
        before = max(_tokens(handler.contexts))
        shard = shard_ref("default", "tokens", shards=DEFAULT_SHARDS).lease
        CoordinationV1Api(kube_api).delete_namespaced_lease(shard, namespace)
        deleted_at = handler.calls
        assert handler.wait_calls(deleted_at + 3)
    finally:
        scheduler.stop()
    tokens = _tokens(handler.contexts)
    assert tokens == sorted(tokens), tokens
    assert len(set(tokens)) == len(tokens), tokens
    assert max(tokens) > before


def _tokens(contexts: list[JobContext]) -> list[int]:
    return [ctx.token for ctx in contexts if ctx.token is not None]


def test_a_single_owner_term_after_its_lease_is_deleted_has_a_higher_token(
    kube: Kube, kube_api: ApiClient, namespace: str
) -> None:
    leases = CoordinationV1Api(kube_api)
    name = job_lease_name("owned")
    leases.create_namespaced_lease(
        namespace,
        {
            "metadata": {"name": name, "labels": {"leasecron.dev/role": "leader"}},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 5},
        },
    )
    job = scheduled_job(
        "owned",
        bucket="single-owner",
        election={"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"},
    )
    apply_manifests(kube_api, [job], namespace=namespace)
    handler = CapturingHandler(lambda ctx: ctx.wait_lost(30))
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register("owned", handler)
    scheduler.start()
    try:
        assert handler.wait_calls(1)
        first = handler.contexts[0].token
        assert first is not None and first > 5
        leases.delete_namespaced_lease(name, namespace)
        assert handler.wait_calls(2, timeout=30)
    finally:
        scheduler.stop()
    again = handler.contexts[1].token
    assert again is not None and again > first, (first, again)
