"""Replicas that disagree about how a job is claimed, against a real API server: a job's ticks
are claimed on one Lease at a time (its own or one shard Lease), whatever each replica's view
of the job's spec or of the shard count, and its fencing token only grows as it moves between
them (docs/claims.md, "Moving a job between claim models")."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from leasecron import JobContext, Scheduler
from leasecron.coordination.resourcelocks import ROLE_JOB, ROLE_SHARD, default_labels
from leasecron.kube.clients import Kube
from leasecron.models.leases import lease_annotations
from leasecron.models.names import (
    ANNOTATION_TICK,
    GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    SCHEDULEDJOB_PLURAL,
    VERSION,
    format_tick,
    job_lease_name,
)
from leasecron.models.shards import (
    ANNOTATION_SHARDED,
    parse_gate,
    shard_lease_name,
)
from leasecron.models.specs import job_label_value
from leasecron.runtime import Tuning
from leasecron.testing import poll
from leasecron.testing.handlers import CapturingHandler, scheduled_job

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)
EARLIER = datetime(2020, 1, 1, tzinfo=UTC)
SHORT = {"keepAlive": False, "atMostFor": "5s"}
LONG = {"keepAlive": True, "atMostFor": "5s"}


def _create(api: Any, namespace: str, name: str, lock: dict[str, Any]) -> None:
    manifest = scheduled_job(name, schedule="@every 1s", handler="work", lock=lock)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
    )


def _set_lock(api: Any, namespace: str, name: str, lock: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, name, {"spec": {"lock": lock}}
    )


def _gate(api: Any, namespace: str, job: str) -> Any:
    lease = client.CoordinationV1Api(api).read_namespaced_lease(job_lease_name(job), namespace)
    return parse_gate(lease_annotations({"metadata": {"annotations": lease.metadata.annotations}}))


def _replicas(
    kube: Kube, namespace: str, *shard_counts: int
) -> tuple[list[Scheduler], list[CapturingHandler]]:
    """One Scheduler per shard count (0: every job claimed on its own Lease), each running
    handler "work" with its own capture."""
    captures = [CapturingHandler() for _ in shard_counts]
    schedulers = [
        Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5, shards=count)
        for count in shard_counts
    ]
    for scheduler, capture in zip(schedulers, captures, strict=True):
        scheduler.register("work", capture)
    return schedulers, captures


def _runs(captures: list[CapturingHandler], job: str) -> list[JobContext]:
    return sorted(
        (ctx for c in captures for ctx in list(c.contexts) if ctx.job == job),
        key=lambda ctx: ctx.tick,
    )


def _assert_once_with_growing_tokens(contexts: list[JobContext]) -> None:
    per_tick = Counter(ctx.tick for ctx in contexts)
    twice = sorted(t for t, n in per_tick.items() if n > 1)
    assert not twice, f"ticks run more than once: {twice}"
    tokens = [ctx.token for ctx in contexts]
    assert all(t is not None for t in tokens)
    dropped = [(a.tick, a.token, b.tick, b.token) for a, b in itertools.pairwise(contexts)]
    dropped = [d for d in dropped if d[3] <= d[1]]
    assert not dropped, f"the fencing token did not grow from one tick to the next: {dropped}"


def _contiguous(ticks: list[datetime]) -> list[datetime]:
    """Ticks after which the next one-second tick is missing."""
    return [a for a, b in itertools.pairwise(ticks) if (b - a).total_seconds() > 1]


def test_a_replica_claiming_per_job_and_one_claiming_through_shards_never_run_a_tick_both(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """The widest disagreement: one replica claims the job on its own Lease (no shards), the
    other through a shard Lease. Each tick runs once, tokens only grow, and the job settles on
    one Lease and runs every tick there."""
    (per_job, sharded), captures = _replicas(kube, namespace, 0, 3)
    _create(kube_api, namespace, "both-ways", SHORT)
    sharded.start()
    try:
        assert captures[1].wait_calls(3, timeout=30), "shard runs"
        assert _gate(kube_api, namespace, "both-ways") is not None
        per_job.start()
        assert captures[0].wait_calls(4, timeout=30), "per-job runs"
        ran_before = len(_runs(captures, "both-ways"))
        poll(
            lambda: len(_runs(captures, "both-ways")) >= ran_before + 5,
            timeout=30,
            what="runs after the job settled",
        )
    finally:
        per_job.stop()
        sharded.stop()
    contexts = _runs(captures, "both-ways")
    _assert_once_with_growing_tokens(contexts)
    assert captures[1].contexts, "the sharded replica never ran the job"
    # The job settled on its own Lease (the per-job replica took its ticks back) and the
    # per-job replica ran every tick from its first one on.
    assert _gate(kube_api, namespace, "both-ways") is None
    settled = sorted(ctx.tick for ctx in captures[0].contexts)
    assert not _contiguous(settled), f"ticks missing after {_contiguous(settled)}"
    last_shard_run = max(ctx.tick for ctx in captures[1].contexts)
    assert last_shard_run < settled[0]


def test_replicas_with_different_shard_counts_run_each_tick_once(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """A rollout that changes the shard count: every job's Lease names the one shard Lease
    that claims it, and replicas of either count follow it."""
    names = [f"count-{i}" for i in range(6)]
    schedulers, captures = _replicas(kube, namespace, 2, 3)
    for name in names:
        _create(kube_api, namespace, name, SHORT)
    for scheduler in schedulers:
        scheduler.start()
    try:
        poll(
            lambda: all(len(_runs(captures, n)) >= 8 for n in names),
            timeout=60,
            what="8 runs of every job",
        )
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    gates = {name: _gate(kube_api, namespace, name) for name in names}
    # Each job's Lease names the one shard Lease of the group (of either count) that claims it.
    for gate in gates.values():
        assert gate is not None and gate.ref.shards in (2, 3), gates
        assert gate.lease == shard_lease_name("default", gate.ref.shard, shards=gate.ref.shards)
    for name in names:
        contexts = _runs(captures, name)
        _assert_once_with_growing_tokens(contexts)
        ticks = [ctx.tick for ctx in contexts]
        assert not _contiguous(ticks), f"{name}: ticks missing after {_contiguous(ticks)}"


def test_a_job_moved_between_its_own_lease_and_a_shard_keeps_a_growing_token(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """keepAlive true -> false -> true: per-job claims, shard claims, per-job claims again.
    The job's Lease starts at a high token (it had a long life before); every run's token is
    above the one before, and no tick runs twice while the replicas apply the changes."""
    leases = client.CoordinationV1Api(kube_api)
    labels = default_labels(ROLE_JOB, {LABEL_JOB: job_label_value("mover")})
    leases.create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=job_lease_name("mover"), labels=labels),
            spec=client.V1LeaseSpec(holder_identity="", lease_transitions=500),
        ),
    )
    schedulers, captures = _replicas(kube, namespace, 3, 3)
    _create(kube_api, namespace, "mover", LONG)

    def more_runs(count: int) -> None:
        ran = len(_runs(captures, "mover"))
        poll(lambda: len(_runs(captures, "mover")) >= ran + count, timeout=30, what="runs")

    for scheduler in schedulers:
        scheduler.start()
    try:
        more_runs(4)
        _set_lock(kube_api, namespace, "mover", SHORT)
        poll(lambda: _gate(kube_api, namespace, "mover") is not None, timeout=15, what="gate")
        more_runs(4)
        shard_tokens = [
            lease.spec.lease_transitions or 0
            for lease in leases.list_namespaced_lease(
                namespace, label_selector=f"{LABEL_ROLE}={ROLE_SHARD}"
            ).items
        ]
        _set_lock(kube_api, namespace, "mover", LONG)
        poll(lambda: _gate(kube_api, namespace, "mover") is None, timeout=15, what="no gate")
        more_runs(4)
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    contexts = _runs(captures, "mover")
    _assert_once_with_growing_tokens(contexts)
    assert contexts[0].token is not None and contexts[0].token > 500
    assert shard_tokens and max(shard_tokens) > 500, "the job never ran under a shard claim"


def test_a_sharded_job_whose_lease_is_deleted_is_handed_over_again_and_keeps_running(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """`kubectl delete lease leasecron-job-<name>` of a sharded job: its gate goes with it, and
    the replicas hand it to a shard again (above the tokens its runs had), not leave it
    unclaimed."""
    schedulers, captures = _replicas(kube, namespace, 3, 3)
    _create(kube_api, namespace, "phoenix", SHORT)
    for scheduler in schedulers:
        scheduler.start()
    try:
        poll(lambda: len(_runs(captures, "phoenix")) >= 3, timeout=30, what="runs")
        client.CoordinationV1Api(kube_api).delete_namespaced_lease(
            job_lease_name("phoenix"), namespace
        )
        deleted = len(_runs(captures, "phoenix"))
        poll(
            lambda: len(_runs(captures, "phoenix")) >= deleted + 5,
            timeout=30,
            what="runs after the job's Lease was deleted",
        )
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    assert _gate(kube_api, namespace, "phoenix") is not None
    _assert_once_with_growing_tokens(_runs(captures, "phoenix"))


def test_a_corrupt_gate_stops_no_job_and_is_never_followed_to_another_lease(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """Job Leases whose gate names a Lease that is no shard Lease of the group (here another
    job's), or stops reading while the job runs: the per-job job removes it and runs, the
    sharded ones are handed over afresh and run, and the named Lease is never written."""
    leases = client.CoordinationV1Api(kube_api)
    bogus = json.dumps(
        {"lease": job_lease_name("victim"), "shard": 0, "shards": 3, "from": "2020-01-01T00:00:00Z"}
    )
    for name in ("per-job", "sharded"):
        labels = default_labels(ROLE_JOB, {LABEL_JOB: job_label_value(name)})
        leases.create_namespaced_lease(
            namespace,
            client.V1Lease(
                metadata=client.V1ObjectMeta(
                    name=job_lease_name(name),
                    labels=labels,
                    annotations={ANNOTATION_SHARDED: bogus},
                ),
                spec=client.V1LeaseSpec(holder_identity="", lease_transitions=3),
            ),
        )
    schedulers, captures = _replicas(kube, namespace, 3, 3)
    _create(kube_api, namespace, "per-job", LONG)
    _create(kube_api, namespace, "sharded", SHORT)
    _create(kube_api, namespace, "garbled", SHORT)
    jobs = ("per-job", "sharded", "garbled")
    for scheduler in schedulers:
        scheduler.start()
    try:
        poll(
            lambda: all(len(_runs(captures, n)) >= 4 for n in jobs),
            timeout=40,
            what="runs of every job",
        )
        # A gate garbled while the job runs, on a Lease that records a tick.
        garbled = {ANNOTATION_SHARDED: "{not json", ANNOTATION_TICK: format_tick(EARLIER)}
        leases.patch_namespaced_lease(
            job_lease_name("garbled"), namespace, {"metadata": {"annotations": garbled}}
        )
        ran = len(_runs(captures, "garbled"))
        poll(
            lambda: len(_runs(captures, "garbled")) >= ran + 4,
            timeout=30,
            what="runs after the gate was garbled",
        )
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    names = {lease.metadata.name for lease in leases.list_namespaced_lease(namespace).items}
    assert job_lease_name("victim") not in names
    assert _gate(kube_api, namespace, "per-job") is None
    for name in ("sharded", "garbled"):
        gate = _gate(kube_api, namespace, name)
        assert gate is not None
        assert gate.lease == shard_lease_name("default", gate.ref.shard, shards=3)
    for name in jobs:
        _assert_once_with_growing_tokens(_runs(captures, name))
    for name in ("per-job", "sharded"):  # above the token their Leases started at
        first = _runs(captures, name)[0].token
        assert first is not None and first > 3
