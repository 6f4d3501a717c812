"""`status.holder` of a job that `job=` guards run: the live holder of a guard Lease of the
job when the Lease that runs its schedule has none; the operator's cache indexes guard Leases
by the job they are labelled with and marks only that job. Pure, no API server."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes.client
from operator_builders import START, clock, facts, job_object, lease, snapshot, window

from leasecron.kube.clients import Kube
from leasecron.operator import _conditions as c
from leasecron.operator._jobstatus import desired_status
from leasecron.operator._world import Key, World

GUARD_LEASE = "leasecron-guard-report"


def holder(**fields: Any) -> str:
    at = fields.pop("at")
    view = dataclasses.replace(snapshot(at, shard=fields.pop("shard", None)), **fields)
    status = desired_status(
        facts=facts(),
        snapshot=view,
        previous={},
        on_schedule=c.Condition(
            type=c.ON_SCHEDULE, status=c.TRUE, reason="RunsStarted", message=""
        ),
        missed_runs=0,
        ticks=window(facts(), at),
    )
    return str(status["holder"])


def test_a_live_guard_grant_is_the_holder_while_the_shard_lease_is_free() -> None:
    at = clock()
    guard = lease(name=GUARD_LEASE, holder="guard-a", observed_at=at.monotonic())
    free_shard = lease(observed_at=at.monotonic())
    assert holder(at=at, shard=free_shard, guard_grants=(guard,)) == "guard-a"


def test_the_shard_leases_live_holder_comes_before_a_guards() -> None:
    at = clock()
    guard = lease(name=GUARD_LEASE, holder="guard-a", observed_at=at.monotonic())
    shard = lease(holder="replica-a", observed_at=at.monotonic())
    assert holder(at=at, shard=shard, guard_grants=(guard,)) == "replica-a"


def test_a_guard_grant_expired_by_the_operators_clock_is_no_holder() -> None:
    at = clock()
    guard = lease(name=GUARD_LEASE, holder="guard-a", duration=5, observed_at=at.monotonic())
    at.advance(5)
    assert holder(at=at, guard_grants=(guard,)) == ""


def guard_lease(name: str, job: str, holder: str) -> dict[str, Any]:
    labels = {"leasecron.dev/role": "guard", "leasecron.dev/job": job}
    return {
        "metadata": {"name": name, "namespace": "billing", "labels": labels},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def test_a_guard_lease_marks_only_its_job_and_its_holder_holds_it_until_deleted() -> None:
    at, marked = clock(), list[Key]()
    kube = Kube(kubernetes.client.ApiClient(), max_workers=1)
    cache = World(kube, namespaces=["billing"], clock=at, on_dirty=marked.append)
    cache.upsert_job(job_object("report"))
    cache.upsert_job(job_object("other"))
    marked.clear()
    obj = guard_lease(GUARD_LEASE, "report", "guard-a")
    cache._leases["billing"]._apply("ADDED", obj)  # the watch event, handed to the World
    assert marked == [("billing", "report")]
    report, other = (cache.facts(("billing", name)) for name in ("report", "other"))
    view = cache.snapshot(report, now=START, now_mono=at.monotonic())  # type: ignore[arg-type]
    assert view.grant_holder(fallback_s=15) == "guard-a"
    other_view = cache.snapshot(other, now=START, now_mono=at.monotonic())  # type: ignore[arg-type]
    assert other_view.grant_holder(fallback_s=15) == ""
    cache._leases["billing"]._apply("DELETED", obj)
    view = cache.snapshot(report, now=START, now_mono=at.monotonic())  # type: ignore[arg-type]
    assert view.guard_grants == ()
