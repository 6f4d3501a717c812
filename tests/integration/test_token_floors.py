"""Fencing tokens never go backwards across Lease re-creation, against the real API server:
the floors module reads the highest token on record and keeps tombstones that only rise, and
the operator starts a re-created job Lease above the last token (Lease deleted by hand, or
its ScheduledJob deleted and applied again)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from operator_helpers import (
    GROUP,
    VERSION,
    StartOperator,
    StartReplica,
    apply_job,
    get_job,
    jobruns,
    poll,
)

from leasecron import Scheduler
from leasecron.coordination.floors import (
    FLOORS_LEASE,
    record_floor,
    token_floor,
    tombstone_key,
)
from leasecron.kube.clients import Kube
from leasecron.models.leases import format_micro_time
from leasecron.models.specs import JobRun, Outcome
from leasecron.runtime import Tuning
from leasecron.testing.faults import ENV_VAR, Fault
from leasecron.testing.handlers import CapturingHandler

T = TypeVar("T")
FINALIZER = "leasecron.dev/token-floor"


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


def lists_served(api: ApiClient, namespace: str) -> bool:
    """Whether JobRuns can be listed yet: right after a CRD is created, the API server
    answers LISTs with 429 until its watch cache is initialised."""
    try:
        jobruns(api, namespace)
    except ApiException as e:
        if e.status == 429:
            return False
        raise
    return True


@pytest.fixture
def kube(kube_api: ApiClient, namespace: str, leasecron_crds: list[str]) -> Kube:
    poll(lambda: lists_served(kube_api, namespace), timeout=30, what="JobRun lists served")
    return Kube(kube_api, max_workers=4)


def record_finished_run(api: ApiClient, job: dict[str, Any], *, token: int) -> None:
    """A Succeeded JobRun of `job` (its 02:00 tick on 2026-01-01) with fencing token `token`."""
    namespace = job["metadata"]["namespace"]
    body = JobRun.for_tick(
        job=job["metadata"]["name"],
        tick=datetime(2026, 1, 1, 2, tzinfo=UTC),
        holder="replica-a",
        start=datetime(2026, 1, 1, 2, tzinfo=UTC),
        fencing_token=token,
        namespace=namespace,
    ).finish(outcome=Outcome.SUCCEEDED, end=datetime(2026, 1, 1, 2, 1, tzinfo=UTC))
    CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "jobruns", body.to_resource(job_uid=job["metadata"]["uid"])
    )


def delete_held_job(
    api: ApiClient, namespace: str, name: str, *, timeout: float, what: str
) -> None:
    """Once the operator holds ScheduledJob `name` by its finalizer, delete it and wait until
    it is gone (`what`: the failure message)."""
    poll(
        lambda: FINALIZER in (get_job(api, namespace, name)["metadata"].get("finalizers") or []),
        timeout=10,
        what="the job held by the operator's finalizer",
    )
    CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", name
    )

    def gone() -> bool:
        listed = CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs"
        )
        return not listed["items"]

    poll(gone, timeout=timeout, what=what)


def floors_annotations(api: ApiClient, namespace: str) -> dict[str, str]:
    found = [
        x
        for x in CoordinationV1Api(api).list_namespaced_lease(namespace).items
        if x.metadata.name == FLOORS_LEASE
    ]
    return dict(found[0].metadata.annotations or {}) if found else {}


def job_lease(api: ApiClient, namespace: str, job: str) -> Any:
    name = f"leasecron-job-{job}"
    for lease in CoordinationV1Api(api).list_namespaced_lease(namespace).items:
        if lease.metadata.name == name:
            return lease
    return None


# --- the floors module ---------------------------------------------------------------


def test_a_tombstone_is_created_raised_and_never_lowered(kube: Kube, namespace: str) -> None:
    assert run(token_floor(kube, namespace=namespace, job="report")) == 0
    run(record_floor(kube, namespace=namespace, job="report", token=5))
    run(record_floor(kube, namespace=namespace, job="report", token=3))
    assert run(token_floor(kube, namespace=namespace, job="report")) == 5
    run(record_floor(kube, namespace=namespace, job="report", token=8))
    assert run(token_floor(kube, namespace=namespace, job="report")) == 8
    assert run(token_floor(kube, namespace=namespace, job="other")) == 0


def test_concurrent_records_keep_the_highest_token(kube: Kube, namespace: str) -> None:
    async def all_at_once() -> None:
        await asyncio.gather(
            *(
                record_floor(kube, namespace=namespace, job=f"job-{i % 3}", token=i)
                for i in range(1, 13)
            )
        )

    run(all_at_once())
    assert [run(token_floor(kube, namespace=namespace, job=f"job-{j}")) for j in range(3)] == [
        12,
        10,
        11,
    ]


def test_a_long_job_name_gets_a_tombstone_too(kube: Kube, namespace: str) -> None:
    job = "a-rather-long-job-name-" + "x" * 200
    run(record_floor(kube, namespace=namespace, job=job, token=4))
    assert run(token_floor(kube, namespace=namespace, job=job)) == 4


def test_a_negative_token_is_refused_naming_the_value(kube: Kube, namespace: str) -> None:
    with pytest.raises(ValueError, match="-1"):
        run(record_floor(kube, namespace=namespace, job="report", token=-1))


def test_the_floor_counts_job_runs_and_the_job_status(
    kube: Kube, kube_api: ApiClient, namespace: str, leasecron_crds: list[str]
) -> None:
    job = apply_job(kube_api, namespace, "report", schedule="0 2 * * *")
    record_finished_run(kube_api, job, token=6)
    assert run(token_floor(kube, namespace=namespace, job="report")) == 6
    CustomObjectsApi(kube_api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "scheduledjobs",
        "report",
        {"status": {"lastRun": {"fencingToken": 9}}},
    )
    assert run(token_floor(kube, namespace=namespace, job="report")) == 9


# --- the operator ----------------------------------------------------------------------


def test_a_job_lease_deleted_by_hand_comes_back_above_its_last_token(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
) -> None:
    """A single-owner job's own Lease (once-per-tick jobs have none: their tokens are the
    group record's, tests/integration/test_runtime_claim_engine.py)."""
    coordination = CoordinationV1Api(kube_api)
    with start_operator():
        apply_job(kube_api, namespace, "report", bucket="single-owner", schedule=None)
        lease = poll(lambda: job_lease(kube_api, namespace, "report"), timeout=10, what="Lease")
        now = format_micro_time(datetime.now(UTC))
        lease.spec.holder_identity, lease.spec.lease_duration_seconds = "replica-a", 15
        lease.spec.acquire_time = lease.spec.renew_time = now
        lease.spec.lease_transitions = 7  # seven claims, none recorded anywhere else
        coordination.replace_namespaced_lease(lease.metadata.name, namespace, lease)
        old_uid = lease.metadata.uid
        # The operator has seen that version (it shows its holder) before it is deleted.
        poll(
            lambda: (
                (get_job(kube_api, namespace, "report").get("status") or {}).get("holder")
                == "replica-a"
            ),
            timeout=20,
            what="the replaced Lease's holder in the job's status",
        )

        coordination.delete_namespaced_lease(lease.metadata.name, namespace)

        again = poll(
            lambda: (
                (x := job_lease(kube_api, namespace, "report")) and x.metadata.uid != old_uid and x
            ),
            timeout=10,
            what="the Lease created again",
        )
        assert again.spec.lease_transitions >= 7
        recorded = poll(
            lambda: floors_annotations(kube_api, namespace).get(tombstone_key("report")),
            timeout=10,
            what="the last token recorded",
        )
        assert recorded == "7"


def test_a_job_deleted_and_applied_again_continues_its_tokens(
    kube_api: ApiClient,
    namespace: str,
    start_operator: StartOperator,
    start_replica: StartReplica,
) -> None:
    spec = {"bucket": "single-owner", "schedule": None, "group": "workers", "handler": "tick"}
    with start_operator():
        apply_job(kube_api, namespace, "tick", **spec)
        with start_replica(identity="worker", group="workers", handlers="tick"):
            poll(
                lambda: (
                    (x := job_lease(kube_api, namespace, "tick"))
                    and (x.spec.lease_transitions or 0) >= 1
                ),
                timeout=20,
                what="a term",
            )
            delete_held_job(kube_api, namespace, "tick", timeout=30, what="the job gone")
        last = int(floors_annotations(kube_api, namespace)[tombstone_key("tick")])
        assert last >= 1
        # Garbage collection removes the Lease and JobRuns of the deleted job; in a control
        # plane started moments ago it notices a new CRD's owners only after its discovery
        # resync (~30 s), so the test removes them as the collector would.
        old = job_lease(kube_api, namespace, "tick")
        if old is not None:
            CoordinationV1Api(kube_api).delete_namespaced_lease(old.metadata.name, namespace)
        for record in jobruns(kube_api, namespace):
            CustomObjectsApi(kube_api).delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "jobruns", record["metadata"]["name"]
            )
        poll(
            lambda: (
                job_lease(kube_api, namespace, "tick") is None and not jobruns(kube_api, namespace)
            ),
            timeout=10,
            what="the Lease and the JobRuns of the deleted job gone",
        )

        uid = apply_job(kube_api, namespace, "tick", **spec)["metadata"]["uid"]
        fresh = poll(lambda: job_lease(kube_api, namespace, "tick"), timeout=10, what="new Lease")
        assert fresh.spec.lease_transitions >= last
        with start_replica(identity="worker-2", group="workers", handlers="tick"):
            first = poll(
                lambda: [
                    r
                    for r in jobruns(kube_api, namespace)
                    if r["metadata"]["ownerReferences"][0]["uid"] == uid
                    and r["spec"].get("fencingToken")
                ],
                timeout=20,
                what="the first run of the job applied again",
            )
        assert min(r["spec"]["fencingToken"] for r in first) > last


def test_a_deletion_waits_only_a_bounded_time_when_the_floor_cannot_be_recorded(
    kube_api: ApiClient,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start_operator: StartOperator,
) -> None:
    faults = tmp_path / "faults.json"
    refuse = Fault(action="fail", resource="leases", name=FLOORS_LEASE)  # every verb
    faults.write_text(json.dumps([refuse.to_dict()]))
    monkeypatch.setenv(ENV_VAR, str(faults))  # read by the operator subprocess's Kube
    limit = ["--floor-record-limit=2s"]
    with start_operator(extra_args=limit) as operator:
        job = apply_job(kube_api, namespace, "report", bucket="single-owner", schedule=None)
        record_finished_run(kube_api, job, token=3)
        delete_held_job(
            kube_api,
            namespace,
            "report",
            timeout=20,
            what="the job deleted although its floor could not be recorded",
        )
        assert "token floor not recorded" in operator.log_path.read_text()
    assert floors_annotations(kube_api, namespace) == {}


def test_a_job_moved_to_another_group_keeps_its_tokens_rising(
    kube_api: ApiClient, kube: Kube, namespace: str, start_operator: StartOperator
) -> None:
    """The other group's shard Leases were made before the job ran many ticks, so they have
    handed out fewer tokens than the job has seen: the job's first claim there goes above the
    token its status records."""
    fast = Tuning(member_duration_s=3, member_renew_every=1.0)
    before, after = CapturingHandler(), CapturingHandler()
    with start_operator(), contextlib.ExitStack() as stack:
        other = Scheduler(namespace=namespace, kube=kube, tuning=fast, group="other")
        other.register("moving", after)
        other.start()  # its group record and shard Leases are made now, at low tokens
        stack.callback(other.stop)
        apply_job(kube_api, namespace, "moving", schedule="@every 1s")
        first = Scheduler(namespace=namespace, kube=kube, tuning=fast)
        first.register("moving", before)
        first.start()
        try:
            assert before.wait_calls(6)
        finally:
            first.stop()
        highest = max(ctx.token for ctx in before.contexts)
        poll(
            lambda: (
                (
                    (get_job(kube_api, namespace, "moving").get("status") or {}).get("lastRun")
                    or {}
                ).get("fencingToken")
                == highest
            ),
            timeout=20,
            what="the last token in the job's status",
        )
        CustomObjectsApi(kube_api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", "moving", {"spec": {"group": "other"}}
        )
        assert after.wait_calls(2)
    tokens = [ctx.token for ctx in after.contexts]
    assert min(tokens) > highest, (highest, tokens)
