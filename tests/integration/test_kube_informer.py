"""Informer against the real API server: it sees changes, stays quiet while idle, and survives
API-server restarts and expired resourceVersions (410 Gone)."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes.client import ApiClient

from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import ScheduledJobStore
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer, WatchEvent
from leasecron.testing import free_port
from leasecron.testing.controlplane import ControlPlane

pytestmark = pytest.mark.integration
T = TypeVar("T")
DEADLINE = 10.0


def lease(name: str, holder: str = "a", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"holderIdentity": holder}}


def holder_is(informer: Informer, namespace: str, name: str, holder: str) -> Callable[[], bool]:
    def check() -> bool:
        obj = informer.get(namespace, name)
        return obj is not None and obj["spec"].get("holderIdentity") == holder

    return check


async def started(kube: Kube, namespace: str, **selectors: str) -> Informer:
    informer = Informer(
        kube, path=LeaseStore(kube).collection_path(namespace=namespace), **selectors
    )
    await informer.start()
    return informer


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


def test_the_informer_lists_what_exists_before_it_starts(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> None:
        kube = Kube(kube_api, max_workers=4)
        await LeaseStore(kube).create(namespace=namespace, body=lease("early"))
        informer = await started(kube, namespace)
        try:
            assert [o["metadata"]["name"] for o in informer.items()] == ["early"]
            assert informer.observed_at(namespace, "early") is not None
            assert informer.healthy
        finally:
            await informer.stop()

    run(scenario)


def test_the_informer_sees_create_update_and_delete_within_a_deadline(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> list[tuple[str, str]]:
        kube = Kube(kube_api, max_workers=4)
        store = LeaseStore(kube)
        informer = await started(kube, namespace)
        events: list[WatchEvent] = []
        informer.subscribe(events.append)
        try:
            created = await store.create(namespace=namespace, body=lease("a"))
            assert await informer.wait_for(
                holder_is(informer, namespace, "a", "a"), timeout=DEADLINE
            )
            first_seen = informer.observed_at(namespace, "a") or 0.0
            await store.replace(
                namespace=namespace, body={**created, "spec": {"holderIdentity": "b"}}
            )
            assert await informer.wait_for(
                holder_is(informer, namespace, "a", "b"), timeout=DEADLINE
            )
            assert (informer.observed_at(namespace, "a") or 0.0) > first_seen > 0.0
            await store.delete(namespace=namespace, name="a")
            assert await informer.wait_for(
                lambda: informer.get(namespace, "a") is None, timeout=DEADLINE
            )
            assert informer.observed_at(namespace, "a") is None
        finally:
            await informer.stop()
        return [(e.type, e.obj["metadata"]["name"]) for e in events]

    assert run(scenario) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_the_informer_sends_no_requests_while_nothing_changes(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> int:
        kube = Kube(kube_api, max_workers=4)
        await LeaseStore(kube).create(namespace=namespace, body=lease("a"))
        informer = await started(kube, namespace)
        try:
            # one POST, one list, then the watch thread opens its stream: wait for that GET
            for _ in range(500):
                if kube.request_count >= 3:
                    break
                await asyncio.sleep(0.01)
            before = kube.request_count
            assert before == 3
            for _ in range(15):  # 1.5 s of reading the cache, as a standby replica does
                assert informer.get(namespace, "a") is not None
                await asyncio.sleep(0.1)
            return kube.request_count - before
        finally:
            await informer.stop()

    assert run(scenario) == 0


def test_a_label_selector_keeps_other_objects_out_of_the_cache(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> list[str]:
        kube = Kube(kube_api, max_workers=4)
        store = LeaseStore(kube)
        informer = await started(kube, namespace, label_selector="role=job")
        try:
            await store.create(namespace=namespace, body=lease("other"))
            await store.create(namespace=namespace, body=lease("mine", labels={"role": "job"}))
            assert await informer.wait_for(lambda: bool(informer.items()), timeout=DEADLINE)
            return [o["metadata"]["name"] for o in informer.items()]
        finally:
            await informer.stop()

    assert run(scenario) == ["mine"]


def test_the_scheduledjob_informer_keeps_each_job_compact_and_the_rest_of_it(
    kube_api: ApiClient, namespace: str, leasecron_crds: list[str]
) -> None:
    """The API server writes managedFields on every object, and `kubectl apply` a copy of the
    object in an annotation; the replicas' ScheduledJob cache drops both (the larger part of a
    small job's object) and keeps all else, events too; two jobs with equal specs (with the
    API server's defaults) hold one spec."""

    async def scenario() -> None:
        kube = Kube(kube_api, max_workers=4)
        store = ScheduledJobStore(kube)
        spec = {"bucket": "once-per-tick", "schedule": "* * * * *"}
        applied = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "billing"}
        made = [
            await store.create(
                namespace=namespace,
                body={
                    "apiVersion": "leasecron.dev/v1alpha1",
                    "kind": "ScheduledJob",
                    "metadata": {"name": name, "annotations": applied},
                    "spec": spec,
                },
            )
            for name in ("report", "digest")
        ]
        assert made[0]["metadata"].get("managedFields")
        informer = store.informer(namespace=namespace)
        events: list[WatchEvent] = []
        informer.subscribe(events.append)
        await informer.start()
        try:
            report, digest = informer.get(namespace, "report"), informer.get(namespace, "digest")
            assert report is not None and digest is not None
            assert "managedFields" not in report["metadata"]
            assert report["metadata"]["annotations"] == {"team": "billing"}
            assert report["spec"] == made[0]["spec"] and len(report["spec"]) > len(spec)
            assert report["spec"] is digest["spec"]
            assert report["metadata"]["uid"] == made[0]["metadata"]["uid"]
            assert all("managedFields" not in e.obj.get("metadata", {}) for e in events)
        finally:
            await informer.stop()

    run(scenario)


def test_a_failing_subscriber_does_not_stop_the_informer(
    kube_api: ApiClient, namespace: str
) -> None:
    def explode(event: WatchEvent) -> None:
        raise RuntimeError(f"subscriber bug on {event.type}")

    async def scenario() -> list[str]:
        kube = Kube(kube_api, max_workers=4)
        store = LeaseStore(kube)
        informer = await started(kube, namespace)
        seen: list[str] = []
        informer.subscribe(explode)
        informer.subscribe(lambda e: seen.append(e.obj["metadata"]["name"]))
        try:
            for name in ("a", "b"):
                await store.create(namespace=namespace, body=lease(name))
            assert await informer.wait_for(lambda: len(informer.items()) == 2, timeout=DEADLINE)
            return seen
        finally:
            await informer.stop()

    assert run(scenario) == ["a", "b"]


def test_the_informer_reconnects_after_an_api_server_restart(
    local_controlplane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> None:
        kube = Kube(kube_api, max_workers=4, request_timeout=5.0)
        store = LeaseStore(kube)
        informer = await started(kube, namespace)
        try:
            local_controlplane.stop_apiserver()
            try:
                assert await informer.wait_for(lambda: not informer.healthy, timeout=DEADLINE)
            finally:
                await asyncio.to_thread(local_controlplane.start_apiserver)
            assert await informer.wait_for(lambda: informer.healthy, timeout=30.0)
            await store.create(namespace=namespace, body=lease("after"))
            assert await informer.wait_for(
                holder_is(informer, namespace, "after", "a"), timeout=DEADLINE
            )
        finally:
            await informer.stop()

    run(scenario)


@pytest.fixture(scope="module")
def private_controlplane() -> Iterator[tuple[ControlPlane, int]]:
    """A control plane of this module's own, with a known etcd port to write etcd directly."""
    port = free_port()
    with ControlPlane(controller_manager=False, etcd_port=port) as plane:
        yield plane, port


def _etcd_delete(port: int, key: str) -> None:
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v3/kv/deleterange", data=body, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.load(response).get("deleted") == "1"


def test_the_informer_relists_after_410_and_reports_what_vanished_meanwhile(
    private_controlplane: tuple[ControlPlane, int],
) -> None:
    plane, etcd_port = private_controlplane

    async def scenario() -> list[tuple[str, str]]:
        api = plane.api_client()
        kube = Kube(api, max_workers=4, request_timeout=5.0)
        store = LeaseStore(kube)
        await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "gone"}})
        for name in ("kept", "vanished"):
            await store.create(namespace="gone", body=lease(name))
        informer = await started(kube, "gone")
        events: list[WatchEvent] = []
        informer.subscribe(events.append)
        try:
            plane.stop_apiserver()
            try:
                # behind the API server's back: its watch cache restarts past our version
                _etcd_delete(etcd_port, "/registry/leases/gone/vanished")
            finally:
                await asyncio.to_thread(plane.start_apiserver)
            assert await informer.wait_for(lambda: informer.relists > 0, timeout=30.0)
            assert informer.get("gone", "vanished") is None
            assert informer.get("gone", "kept") is not None
        finally:
            await informer.stop()
            api.close()
        return [(e.type, e.obj.get("metadata", {}).get("name", "")) for e in events]

    assert run(scenario) == [("DELETED", "vanished"), ("SYNCED", "")]
