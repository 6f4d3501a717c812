"""Interoperability: Leases leasecron writes are ordinary client-go Leases (the official
client's V1Lease model reads them, `kubectl get lease` shows the HOLDER), and a Lease written
the way client-go's LeaseLock writes it is respected and taken over correctly."""

from __future__ import annotations

import asyncio
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api, V1Lease

from leasecron.coordination import Elector, TickLock, lease_informer
from leasecron.kube.clients import Kube
from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.models.leases import format_micro_time
from leasecron.testing._assets import find_assets

pytestmark = pytest.mark.integration
FAST = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)
TICK = datetime(2026, 1, 1, tzinfo=UTC)
WAIT = 10.0


def kubectl(kubeconfig: Path, *args: str) -> str:
    binary = find_assets().binary("kubectl")
    return subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout


def test_a_lease_we_write_is_read_by_the_official_model_and_kubectl_shows_the_holder(
    kube_api: ApiClient, kubeconfig: Path, namespace: str
) -> None:
    async def scenario() -> None:
        kube = Kube(kube_api, max_workers=2)
        lock = TickLock(
            kube,
            None,
            namespace=namespace,
            name="leasecron-job-interop",
            config=LockConfig(at_most_for=30),
            identity="billing-api-7d9f-x2-0a1b2c3d",
        )
        assert await lock.claim(TICK) is not None

    asyncio.run(scenario())
    lease = CoordinationV1Api(kube_api).read_namespaced_lease("leasecron-job-interop", namespace)
    assert isinstance(lease, V1Lease)
    assert lease.spec is not None
    assert lease.spec.holder_identity == "billing-api-7d9f-x2-0a1b2c3d"
    assert lease.spec.lease_duration_seconds == 30
    assert lease.spec.lease_transitions == 1
    assert isinstance(lease.spec.acquire_time, datetime)
    assert isinstance(lease.spec.renew_time, datetime)
    table = kubectl(kubeconfig, "get", "lease", "-n", namespace).splitlines()
    assert table[0].split()[:2] == ["NAME", "HOLDER"]
    assert table[1].split()[:2] == ["leasecron-job-interop", "billing-api-7d9f-x2-0a1b2c3d"]


def client_go_lease(holder: str, *, duration: int, transitions: int) -> dict[str, Any]:
    """What client-go's LeaseLock creates (plus our role label, so the cache selects it)."""
    now = format_micro_time(datetime.now(UTC))
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "shared", "labels": {"leasecron.dev/role": "leader"}},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": transitions,
        },
    }


def test_a_lease_held_by_a_client_go_elector_is_respected_and_taken_over_after_its_release(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[float, int]:
        kube = Kube(kube_api, max_workers=2)
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        created = await kube.request(
            "POST", path, body=client_go_lease("go-elector", duration=15, transitions=3)
        )
        informer = lease_informer(kube, namespace=namespace)
        await informer.start()
        elector = Elector(
            kube, informer, namespace=namespace, name="shared", config=FAST, identity="py"
        )
        try:
            elector.start()
            assert await elector.wait_leading(timeout=1.0) is None  # the Go leader is live
            assert elector.leader == "go-elector"
            # client-go's ReleaseOnCancel: empty holder, duration 1, transitions unchanged.
            released = client_go_lease("", duration=1, transitions=3)
            released["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
            began = time.monotonic()
            await kube.request("PUT", f"{path}/shared", body=released)
            term = await elector.wait_leading(timeout=WAIT)
            assert term is not None
            return time.monotonic() - began, term.token
        finally:
            await elector.stop(release=True)
            await informer.stop()

    takeover, token = asyncio.run(scenario())
    assert token == 4  # one more transition, as client-go counts a change of holder
    assert takeover < 1.0
    spec = CoordinationV1Api(kube_api).read_namespaced_lease("shared", namespace).spec
    assert spec is not None
    assert (spec.holder_identity, spec.lease_duration_seconds, spec.lease_transitions) == (
        "",
        1,
        4,
    )
