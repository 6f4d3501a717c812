"""When the API server is unreachable no claim succeeds and the leader steps down within
renewDeadline; when it is back everything resumes by itself, with no manual cleanup."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY

from leasecron.coordination import Elector, TickLock, lease_informer
from leasecron.kube.clients import Kube
from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.testing.controlplane import ControlPlane

pytestmark = pytest.mark.integration
FAST = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)
TICK = datetime(2026, 1, 1, tzinfo=UTC)
WAIT = 10.0
RESTART_WAIT = 60.0


def skips(namespace: str, reason: str) -> float:
    labels = {"job_namespace": namespace, "scheduled_job": "nightly", "reason": reason}
    return REGISTRY.get_sample_value("leasecron_skips_total", labels) or 0.0


def test_an_unreachable_store_stops_leaders_and_claims_and_both_resume_afterwards(
    local_controlplane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> float:
        kube = Kube(kube_api, max_workers=4, request_timeout=2.0)
        informer = lease_informer(kube, namespace=namespace)
        await informer.start()
        elector = Elector(
            kube, informer, namespace=namespace, name="leader", config=FAST, identity="a"
        )
        lock = TickLock(
            kube,
            informer,
            namespace=namespace,
            name="job",
            job="nightly",
            config=LockConfig(at_most_for=1),
            identity="a",
        )
        try:
            elector.start()
            term = await elector.wait_leading(timeout=WAIT)
            assert term is not None
            grant = await lock.claim(TICK)
            assert grant is not None
            await grant.release()
            unavailable = skips(namespace, "store_unavailable")
            local_controlplane.stop_apiserver()
            stopped = time.monotonic()
            try:
                assert await term.lost.wait_async(WAIT)
                stepped_down = time.monotonic() - stopped
                assert not elector.is_leader
                for minute in range(1, 4):
                    assert await lock.claim(TICK + timedelta(minutes=minute)) is None
                assert skips(namespace, "store_unavailable") == unavailable + 3
            finally:
                local_controlplane.start_apiserver()
            again = await elector.wait_leading(timeout=RESTART_WAIT)
            assert again is not None and again.token > term.token
            assert await lock.claim(TICK + timedelta(minutes=5)) is not None
            return stepped_down
        finally:
            await elector.stop()
            await informer.stop()

    stepped_down = asyncio.run(scenario())
    assert stepped_down <= FAST.renew_deadline.total_seconds() + 0.25
