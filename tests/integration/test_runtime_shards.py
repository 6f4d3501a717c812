"""Sharded once-per-tick claims against a real API server: one claim per shard and instant
runs every job of the shard due then, once, with a token that never decreases."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION, jobrun_name
from leasecron.models.shards import shard_lease_name, shard_of
from leasecron.runtime import Tuning
from leasecron.testing.handlers import CapturingHandler, scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)
SHORT = {"keepAlive": False, "atMostFor": "5s"}


def create_jobs(api: Any, namespace: str, names: list[str], **spec: Any) -> None:
    objects = client.CustomObjectsApi(api)
    for name in names:
        manifest = scheduled_job(name, schedule="@every 1s", handler="work", **spec)
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
        )


def finished(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if (i.get("status") or {}).get("outcome") not in (None, "Running")]


def test_two_replicas_run_every_tick_of_sharded_jobs_once_with_growing_tokens(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    names = [f"short-{i}" for i in range(6)]
    captures = [CapturingHandler(), CapturingHandler()]
    schedulers = [
        Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5, shards=3)
        for _ in captures
    ]
    for scheduler, capture in zip(schedulers, captures, strict=True):
        scheduler.register("work", capture)
    create_jobs(kube_api, namespace, names, lock=SHORT)
    for scheduler in schedulers:
        scheduler.start()
    try:
        assert captures[0].wait_calls(1, timeout=30) or captures[1].wait_calls(1, timeout=1)
        runs = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            until=lambda items: all(
                sum(1 for i in finished(items) if i["spec"]["job"] == n) >= 4 for n in names
            ),
            timeout=60,
        )
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    contexts: list[JobContext] = [ctx for c in captures for ctx in c.contexts]
    per_tick = Counter((ctx.job, ctx.tick) for ctx in contexts)
    assert per_tick and max(per_tick.values()) == 1, "a tick ran twice"
    # One claim per shard and instant: every job of a shard that ran at an instant ran under
    # the same token.
    instants: dict[tuple[int, Any], set[int | None]] = {}
    for ctx in contexts:
        instants.setdefault((shard_of(ctx.job, shards=3), ctx.tick), set()).add(ctx.token)
    assert all(len(tokens) == 1 for tokens in instants.values()), instants
    assert any(
        len({c.job for c in contexts if (shard_of(c.job, shards=3), c.tick) == k}) > 1
        for k in instants
    ), "no shard ran two jobs at one instant"
    for name in names:
        mine = sorted((ctx.tick, ctx.token) for ctx in contexts if ctx.job == name)
        tokens = [token for _, token in mine]
        assert all(t is not None for t in tokens) and tokens == sorted(tokens)
    by_name = {run["metadata"]["name"]: run for run in runs}
    recorded = [by_name.get(jobrun_name(ctx.job, ctx.tick)) for ctx in contexts]
    done = [run for run in recorded if run is not None and run in finished(runs)]
    assert done and all(run["status"]["outcome"] == "Succeeded" for run in done)
    leases = client.CoordinationV1Api(kube_api).list_namespaced_lease(namespace).items
    shard_leases = {lease.metadata.name for lease in leases} & {
        shard_lease_name("default", i, shards=3) for i in range(3)
    }
    assert shard_leases, "no shard Lease was written"


def test_a_replica_without_a_handler_leaves_the_instant_to_one_that_has_every_handler(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    full, partial = CapturingHandler(), CapturingHandler()
    extra = CapturingHandler()
    both = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5, shards=1)
    both.register("work", full)
    both.register("extra", extra)
    only_work = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5, shards=1)
    only_work.register("work", partial)
    objects = client.CustomObjectsApi(kube_api)
    for name, handler in (("plain-0", "work"), ("plain-1", "work"), ("special", "extra")):
        manifest = scheduled_job(name, schedule="@every 1s", handler=handler, lock=SHORT)
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
        )
    both.start()
    only_work.start()
    try:
        assert extra.wait_calls(12, timeout=60)
    finally:
        only_work.stop()
        both.stop()
    special = sorted(ctx.tick for ctx in extra.contexts)
    settled = [t for t in special if (t - special[0]).total_seconds() >= 3]
    gaps = [b for a, b in itertools.pairwise(settled) if (b - a).total_seconds() > 1]
    assert len(settled) >= 8 and not gaps, f"ticks of 'special' not run before {gaps}"
    ran_work = Counter((c.job, c.tick) for c in full.contexts + partial.contexts)
    assert max(ran_work.values()) == 1
