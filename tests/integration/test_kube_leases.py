"""LeaseStore and ObjectStore against the real API server: conditional writes only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from kubernetes.client import ApiClient

from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, Invalid
from leasecron.kube.leases import LeaseStore
from leasecron.kube.objects import ObjectStore

pytestmark = pytest.mark.integration
T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


def lease(name: str, holder: str = "replica-a") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": holder}}


def holder(store: LeaseStore, namespace: str, name: str) -> str | None:
    found = run(store.get(namespace=namespace, name=name))
    return None if found is None else str(found["spec"].get("holderIdentity"))


@pytest.fixture
def store(kube_api: ApiClient) -> LeaseStore:
    return LeaseStore(Kube(kube_api, max_workers=4))


def test_a_created_lease_can_be_read_back(store: LeaseStore, namespace: str) -> None:
    created = run(store.create(namespace=namespace, body=lease("a")))

    read = run(store.get(namespace=namespace, name="a"))

    assert read is not None
    assert read["spec"]["holderIdentity"] == "replica-a"
    assert read["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_getting_a_missing_lease_returns_none(store: LeaseStore, namespace: str) -> None:
    assert run(store.get(namespace=namespace, name="nobody")) is None


def test_creating_an_existing_lease_raises_already_exists(
    store: LeaseStore, namespace: str
) -> None:
    run(store.create(namespace=namespace, body=lease("a")))

    with pytest.raises(AlreadyExists) as caught:
        run(store.create(namespace=namespace, body=lease("a", holder="replica-b")))

    assert caught.value.status == 409
    assert holder(store, namespace, "a") == "replica-a"


def test_replacing_with_a_stale_resource_version_raises_conflict(
    store: LeaseStore, namespace: str
) -> None:
    first = run(store.create(namespace=namespace, body=lease("a")))
    run(store.replace(namespace=namespace, body={**first, "spec": {"holderIdentity": "b"}}))

    with pytest.raises(Conflict) as caught:
        run(store.replace(namespace=namespace, body={**first, "spec": {"holderIdentity": "c"}}))

    assert caught.value.reason == "Conflict"
    assert holder(store, namespace, "a") == "b"


def test_replacing_with_the_current_resource_version_succeeds(
    store: LeaseStore, namespace: str
) -> None:
    first = run(store.create(namespace=namespace, body=lease("a")))

    second = run(
        store.replace(namespace=namespace, body={**first, "spec": {"holderIdentity": "b"}})
    )

    assert second["spec"]["holderIdentity"] == "b"
    assert second["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]


def test_replacing_without_a_resource_version_is_refused_before_any_request(
    store: LeaseStore, namespace: str
) -> None:
    run(store.create(namespace=namespace, body=lease("a")))
    sent = store.kube.request_count

    with pytest.raises(ValueError, match="resourceVersion"):
        run(store.replace(namespace=namespace, body=lease("a", holder="blind")))

    assert store.kube.request_count == sent
    assert holder(store, namespace, "a") == "replica-a"


def test_a_conditional_delete_of_a_changed_lease_raises_conflict(
    store: LeaseStore, namespace: str
) -> None:
    first = run(store.create(namespace=namespace, body=lease("a")))
    run(store.replace(namespace=namespace, body={**first, "spec": {"holderIdentity": "b"}}))

    with pytest.raises(Conflict):
        run(
            store.delete(
                namespace=namespace,
                name="a",
                resource_version=first["metadata"]["resourceVersion"],
            )
        )

    assert run(store.get(namespace=namespace, name="a")) is not None


def test_deleting_removes_the_lease_and_deleting_again_is_not_an_error(
    store: LeaseStore, namespace: str
) -> None:
    created = run(store.create(namespace=namespace, body=lease("a")))

    run(
        store.delete(
            namespace=namespace, name="a", resource_version=created["metadata"]["resourceVersion"]
        )
    )
    run(store.delete(namespace=namespace, name="a"))

    assert run(store.get(namespace=namespace, name="a")) is None


def test_an_invalid_lease_raises_invalid(store: LeaseStore, namespace: str) -> None:
    with pytest.raises(Invalid):
        run(
            store.create(
                namespace=namespace,
                body={"metadata": {"name": "a"}, "spec": {"leaseDurationSeconds": "soon"}},
            )
        )


def test_a_conditional_merge_patch_with_a_stale_version_raises_conflict(
    kube_api: ApiClient, namespace: str
) -> None:
    maps = ObjectStore(Kube(kube_api, max_workers=2), group="", version="v1", plural="configmaps")
    first = run(maps.create(namespace=namespace, body={"metadata": {"name": "c"}, "data": {}}))
    run(maps.patch(namespace=namespace, name="c", patch={"data": {"k": "1"}}))

    with pytest.raises(Conflict):
        stale = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}}
        run(maps.patch(namespace=namespace, name="c", patch={**stale, "data": {"k": "2"}}))

    listed = run(maps.list(namespace=namespace))
    assert [(m["metadata"]["name"], m["data"]) for m in listed] == [("c", {"k": "1"})]
