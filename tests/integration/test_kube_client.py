"""Kube against real and unreachable API servers: error classes, counting, configuration."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import pytest
from kubernetes.client import ApiClient

from leasecron.kube.clients import Kube, collection_path
from leasecron.kube.errors import Forbidden, NotFound, Unavailable
from leasecron.kube.leases import LeaseStore
from leasecron.testing.pytest_plugin import ServiceAccountClientFactory

pytestmark = pytest.mark.integration
T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_an_unreachable_server_raises_unavailable() -> None:
    configuration = kubernetes.client.Configuration()
    configuration.host = f"https://127.0.0.1:{closed_port()}"
    kube = Kube(kubernetes.client.ApiClient(configuration), request_timeout=2.0)

    with pytest.raises(Unavailable) as caught:
        run(LeaseStore(kube).get(namespace="default", name="a"))

    assert caught.value.status is None
    assert kube.request_count == 1
    run(kube.close())


def test_requests_are_counted_by_method(kube_api: ApiClient, namespace: str) -> None:
    kube = Kube(kube_api, max_workers=2)
    store = LeaseStore(kube)

    run(store.create(namespace=namespace, body={"metadata": {"name": "a"}, "spec": {}}))
    run(store.get(namespace=namespace, name="a"))
    run(store.get(namespace=namespace, name="b"))

    assert kube.request_counts == {"POST": 1, "GET": 2}
    assert kube.request_count == 3
    assert kube.write_count == 1


def test_a_missing_namespace_collection_raises_not_found(kube_api: ApiClient) -> None:
    kube = Kube(kube_api, max_workers=2)
    path = collection_path(group="", version="v1", plural="nosuchthings", namespace="default")

    with pytest.raises(NotFound):
        run(kube.request("GET", path))


def test_a_service_account_without_rights_gets_forbidden(
    serviceaccount_client: ServiceAccountClientFactory, namespace: str
) -> None:
    api = serviceaccount_client(namespace=namespace, name="nobody")
    kube = Kube(api, max_workers=2)

    with pytest.raises(Forbidden) as caught:
        run(LeaseStore(kube).get(namespace=namespace, name="a"))

    assert caught.value.status == 403


def test_a_service_account_with_lease_rights_can_create_leases(
    serviceaccount_client: ServiceAccountClientFactory, namespace: str
) -> None:
    rules = [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }
    ]
    kube = Kube(serviceaccount_client(namespace=namespace, name="replica", rules=rules))
    store = LeaseStore(kube)

    run(store.create(namespace=namespace, body={"metadata": {"name": "a"}, "spec": {}}))

    assert run(store.get(namespace=namespace, name="a")) is not None


def test_a_kube_from_a_kubeconfig_talks_to_its_cluster(kubeconfig: Path, namespace: str) -> None:
    async def scenario() -> dict[str, Any]:
        kube = Kube.from_config(kubeconfig=str(kubeconfig), max_workers=2)
        try:
            return await kube.request("GET", f"/api/v1/namespaces/{namespace}")
        finally:
            await kube.close()

    assert run(scenario())["metadata"]["name"] == namespace
