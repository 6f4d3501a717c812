"""The operator's caches: which jobs a changed Lease, member Lease or JobRun affects, and
which versions of a ScheduledJob are kept. No API server: events are handed in directly."""

from __future__ import annotations

from typing import Any

import kubernetes.client
import pytest
from operator_builders import START, clock, job_object

from leasecron.kube.clients import Kube
from leasecron.kube.watches import WatchEvent
from leasecron.models.groups import group_lease_name, shard_ref
from leasecron.models.names import jobrun_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.operator._facts import JobFacts
from leasecron.operator._world import Key, World


def world() -> tuple[World, list[Key]]:
    marked: list[Key] = []
    kube = Kube(kubernetes.client.ApiClient(), max_workers=1)
    return World(kube, namespaces=["billing"], clock=clock(), on_dirty=marked.append), marked


def lease(name: str, **labels: str) -> dict[str, Any]:
    annotations = {"leasecron.dev/handlers": '["nightly_report"]'}
    return {
        "metadata": {
            "name": name,
            "namespace": "billing",
            "labels": labels,
            "annotations": annotations,
            "resourceVersion": "5",
        },
        "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15},
    }


def event(kind: str, obj: dict[str, Any]) -> WatchEvent:
    return WatchEvent(type=kind, obj=obj, observed_at=100.0)


def test_a_member_lease_marks_every_job_of_its_group_and_counts_as_a_member() -> None:
    cache, marked = world()
    cache.upsert_job(job_object("a"))
    cache.upsert_job(job_object("b"))
    cache.upsert_job(job_object("other", group="elsewhere"))
    marked.clear()
    member = lease(
        "leasecron-member-billing-api-replica-a",
        **{"leasecron.dev/role": "member", "leasecron.dev/group": "billing-api"},
    )
    cache._lease_event(event("ADDED", member))
    assert sorted(marked) == [("billing", "a"), ("billing", "b")]
    facts = cache.facts(("billing", "a"))
    view = cache.snapshot(facts, now=START, now_mono=101.0)  # type: ignore[arg-type]
    assert [m.holder for m in view.live_members()] == ["replica-a"]


@pytest.mark.parametrize("role", ["leader", "job"])  # "job": as earlier versions labelled it
def test_a_job_lease_marks_only_its_job(role: str) -> None:
    cache, marked = world()
    cache.upsert_job(job_object("a"))
    cache.upsert_job(job_object("b"))
    marked.clear()
    cache._lease_event(
        event(
            "MODIFIED",
            lease("leasecron-job-a", **{"leasecron.dev/role": role, "leasecron.dev/job": "a"}),
        )
    )
    assert marked == [("billing", "a")]


def test_a_jobrun_is_indexed_under_its_job_and_marks_it() -> None:
    cache, marked = world()
    cache.upsert_job(job_object("a"))
    marked.clear()
    run = {
        "metadata": {
            "name": jobrun_name("a", START),
            "namespace": "billing",
            "labels": {"leasecron.dev/job": "a"},
            "resourceVersion": "7",
        },
        "spec": {"job": "a", "tick": "2026-03-01T12:00:00Z", "holder": "replica-a"},
        "status": {"outcome": "Running"},
    }
    cache._run_event(event("ADDED", run))
    assert marked == [("billing", "a")]
    facts = cache.facts(("billing", "a"))
    view = cache.snapshot(facts, now=START, now_mono=101.0)  # type: ignore[arg-type]
    assert [(r.tick, r.outcome) for r in view.runs] == [(START, "Running")]
    cache._run_event(event("DELETED", run))
    assert cache.snapshot(facts, now=START, now_mono=101.0).runs == ()  # type: ignore[arg-type]


def test_an_older_version_of_a_job_never_replaces_a_newer_one() -> None:
    cache, marked = world()
    newer = job_object("a", status={"missedRuns": 2})
    newer["metadata"]["resourceVersion"] = "20"
    older = job_object("a")
    older["metadata"]["resourceVersion"] = "19"
    cache.upsert_job(newer, quiet=True)
    cache.upsert_job(older)
    assert cache.jobs[("billing", "a")]["status"] == {"missedRuns": 2}
    assert marked == []


def test_a_deleted_job_lease_is_reported_with_its_owner_and_last_token() -> None:
    gone: list[tuple[str, str, int]] = []
    kube = Kube(kubernetes.client.ApiClient(), max_workers=1)
    cache = World(
        kube,
        namespaces=["billing"],
        clock=clock(),
        on_dirty=lambda _key: None,
        on_lease_gone=lambda ns, job, token: gone.append((ns, job, token)),
    )
    owned = lease("leasecron-job-report", **{"leasecron.dev/role": "leader"})
    owned["metadata"]["ownerReferences"] = [{"kind": "ScheduledJob", "name": "report"}]
    owned["spec"]["leaseTransitions"] = 7
    legacy = lease("leasecron-job-old", **{"leasecron.dev/role": "job"})  # an earlier version's
    legacy["metadata"]["ownerReferences"] = [{"kind": "ScheduledJob", "name": "old"}]
    legacy["spec"]["leaseTransitions"] = 3
    unused = lease("leasecron-job-idle", **{"leasecron.dev/role": "leader"})
    unused["metadata"]["ownerReferences"] = [{"kind": "ScheduledJob", "name": "idle"}]
    operator = lease("leasecron-operator", **{"leasecron.dev/role": "leader"})
    operator["spec"]["leaseTransitions"] = 4
    floors = lease("leasecron-token-floors", **{"leasecron.dev/role": "floors"})
    member = lease("leasecron-member-g-a", **{"leasecron.dev/role": "member"})
    for obj in (owned, legacy, unused, operator, floors, member):
        cache._lease_event(event("MODIFIED", obj))
        cache._lease_event(event("DELETED", obj))
    # a Lease that never granted has no floor; an election of no job is no job's
    assert gone == [("billing", "report", 7), ("billing", "old", 3)]


def shard_lease(name: str, *, holder: str = "replica-a", tick: str | None = None) -> dict[str, Any]:
    obj = lease(name, **{"leasecron.dev/role": "shard", "leasecron.dev/group": "billing-api"})
    obj["spec"]["holderIdentity"] = holder
    if tick is not None:
        obj["metadata"]["annotations"]["leasecron.dev/tick"] = tick
    return obj


def group_record(shards: int) -> dict[str, Any]:
    obj = lease(
        group_lease_name("billing-api"),
        **{"leasecron.dev/role": "group", "leasecron.dev/group": "billing-api"},
    )
    obj["metadata"]["annotations"] = {"leasecron.dev/shards": str(shards)}
    return obj


def test_a_once_per_tick_job_is_placed_on_the_shard_lease_its_group_record_counts() -> None:
    cache, _ = world()
    cache.upsert_job(job_object("a"))
    facts = cache.facts(("billing", "a"))
    assert isinstance(facts, JobFacts)
    view = cache.snapshot(facts, now=START, now_mono=101.0)
    assert view.shard_lease == shard_ref("billing-api", "a", shards=DEFAULT_SHARDS).lease
    cache._leases["billing"]._apply("ADDED", group_record(1))
    view = cache.snapshot(facts, now=START, now_mono=101.0)
    assert view.shard_lease == shard_ref("billing-api", "a", shards=1).lease


def test_a_shard_lease_marks_only_the_jobs_placed_on_it_and_its_holder_runs_them() -> None:
    cache, marked = world()
    names = [f"job-{i}" for i in range(40)]
    for name in names:
        cache.upsert_job(job_object(name))
    for name in names:  # placed by their first snapshot
        cache.snapshot(cache.facts(("billing", name)), now=START, now_mono=101.0)  # type: ignore[arg-type]
    marked.clear()
    target = shard_ref("billing-api", "job-0", shards=DEFAULT_SHARDS).lease
    cache._lease_event(event("MODIFIED", shard_lease(target, tick="2026-03-01T12:00:00Z")))
    expected = [
        n for n in names if shard_ref("billing-api", n, shards=DEFAULT_SHARDS).lease == target
    ]
    assert sorted(marked) == sorted(("billing", n) for n in expected)
    assert len(expected) < len(names)


def test_a_group_record_marks_every_job_of_its_group() -> None:
    cache, marked = world()
    cache.upsert_job(job_object("a"))
    cache.upsert_job(job_object("other", group="elsewhere"))
    marked.clear()
    cache._lease_event(event("MODIFIED", group_record(4)))
    assert marked == [("billing", "a")]


def test_a_plain_guards_tick_lock_marks_no_job_and_an_earlier_job_guards_marks_its_job() -> None:
    """A plain guard's Lease is a tick lock of no group (role `shard`, no group label): no
    job's status reads it, so its claims, one a tick, mark nothing. Earlier versions' `job=`
    guards labelled theirs `guard` with the job: its holder is still the job's."""
    cache, marked = world()
    cache.upsert_job(job_object("a"))
    cache.upsert_job(job_object("b"))
    marked.clear()
    plain = lease("leasecron-guard-cleanup", **{"leasecron.dev/role": "shard"})
    cache._lease_event(event("MODIFIED", plain))
    assert marked == []
    legacy = lease("leasecron-guard-a", **{"leasecron.dev/role": "guard", "leasecron.dev/job": "a"})
    cache._lease_event(event("MODIFIED", legacy))
    assert marked == [("billing", "a")]
