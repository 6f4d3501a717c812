"""Failures the chaos soak (`leasecron bench chaos`) found, each reproduced on its own against
the real API server with request-level faults, and the operator running as a process.

Found by `leasecron bench chaos --minutes 1 --replicas 3 --seed 1`: during an etcd restart a
replica's claim of tick T was held by the API server until etcd came back; it landed after the
grant's time bound had passed, so the replica freed it without running T. The shard Lease's tick
annotation says T was claimed, so the operator counts T as claimed and no `Missed` JobRun is
ever written: a tick that never ran, without an alarm. Here a delayed claim write stands in
for the API server waiting on etcd.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi
from operator_helpers import StartOperator, poll

from leasecron import Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.groups import shard_ref
from leasecron.models.names import GROUP, JOBRUN_PLURAL, VERSION, jobrun_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.faults import Fault, fault_plan
from leasecron.testing.handlers import CapturingHandler, scheduled_job

pytestmark = pytest.mark.integration
JOB = "late-claim"
EVERY = 2.0
AT_MOST_FOR = 2.0
"""The shard grant's leaseDuration here: how long a claim's grant lasts unless renewed."""
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=int(AT_MOST_FOR))


def _kube(kubeconfig: Path) -> Kube:
    return Kube.from_config(kubeconfig=str(kubeconfig), request_timeout=10.0)


def _outcomes(kube_api: ApiClient, namespace: str) -> dict[str, str]:
    listed = CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL
    )
    return {
        item["metadata"]["name"]: str((item.get("status") or {}).get("outcome") or "")
        for item in listed["items"]
    }


def _between_ticks() -> None:
    """Sleep to half-way between two ticks: the last run was released, and the next write of
    the job's shard Lease is the next tick's claim."""
    phase = time.time() % EVERY
    time.sleep((EVERY / 2 - phase) % EVERY)


def test_a_tick_whose_claim_lands_after_its_grant_expired_is_recorded_missed(
    kube_api: ApiClient,
    namespace: str,
    kubeconfig: Path,
    start_operator: StartOperator,
) -> None:
    job: dict[str, Any] = scheduled_job(
        JOB,
        schedule=f"@every {EVERY:g}s",
        lock={"atMostFor": f"{AT_MOST_FOR:g}s", "atLeastFor": "0s", "keepAlive": True},
        startingDeadline="3s",
        catchUp={"policy": "Latest"},
        history={"succeeded": 100, "failed": 100},
    )
    apply_manifests(kube_api, [job], namespace=namespace)
    lease = shard_ref("default", JOB, shards=DEFAULT_SHARDS).lease
    kube_a, kube_b = _kube(kubeconfig), _kube(kubeconfig)
    ran_a, ran_b = CapturingHandler(), CapturingHandler()
    replica_a = Scheduler(namespace=namespace, kube=kube_a, tuning=FAST, identity="replica-a")
    replica_b = Scheduler(namespace=namespace, kube=kube_b, tuning=FAST, identity="replica-b")
    replica_a.register(JOB, ran_a)
    replica_b.register(JOB, ran_b)
    with start_operator():
        replica_a.start()
        try:
            assert ran_a.wait_calls(2, timeout=30)
            _between_ticks()
            # A's next claim is sent, and lands, only after its grant's time bound has passed
            # (the API server waiting on etcd); after it, A cannot write the Lease at all.
            late = fault_plan(kube_a).add(
                Fault(
                    verb="update",
                    resource="leases",
                    name=lease,
                    action="delay",
                    seconds=AT_MOST_FOR + 0.5,
                    times=1,
                )
            )
            cut = fault_plan(kube_a).add(
                Fault(verb="update", resource="leases", name=lease, action="fail")
            )
            poll(lambda: cut.hits >= 1, timeout=30, what="A's late claim landed")
            replica_b.start()  # another replica takes the job over
            assert ran_b.wait_calls(3, timeout=60)
        finally:
            replica_b.stop()
            replica_a.stop()
            for made in (kube_a, kube_b):
                made.api_client.rest_client.close()
        assert late.hits == 1
        ran = sorted({ctx.tick for ctx in (*ran_a.contexts, *ran_b.contexts)})
        step = timedelta(seconds=EVERY)
        due = [ran[0] + step * k for k in range(int((ran[-1] - ran[0]) / step) + 1)]
        never = [tick for tick in due if tick not in ran]
        assert never, f"every tick ran: {ran}"  # the late claim cost at least its own tick
        wanted = {jobrun_name(JOB, tick) for tick in never}
        # Each tick that never ran gets a JobRun (Missed), from a replica or the operator (the
        # operator judges ticks on its own schedule).
        poll(
            lambda: not wanted - set(_outcomes(kube_api, namespace)),
            timeout=20,
            what=f"a JobRun for each tick that never ran: {sorted(wanted)}",
        )
        recorded = _outcomes(kube_api, namespace)
        assert {recorded[name] for name in wanted} == {"Missed"}, recorded
