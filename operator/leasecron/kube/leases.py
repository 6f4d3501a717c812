"""`LeaseStore`: reads and conditional writes of coordination.k8s.io/v1 Leases, as raw dicts.

The coordination layer parses what it gets with `models.leases.parse_lease` and builds specs
with `models.leases.lease_body`; this module only moves them over HTTP. It enforces the one
rule of the Lease protocol that belongs to I/O: every update carries the observed
resourceVersion (`replace` raises ValueError before sending anything otherwise). It does not
decide who may write: that is the coordination layer's job. `timeout=` on get/create/replace
bounds one request in its sending thread (never wrap these in `asyncio.wait_for`).
"""

from __future__ import annotations

from typing import Any

from leasecron.kube.clients import Kube
from leasecron.kube.objects import ObjectStore

LEASE_GROUP = "coordination.k8s.io"
LEASE_VERSION = "v1"
LEASE_PLURAL = "leases"
LEASE_API_VERSION = f"{LEASE_GROUP}/{LEASE_VERSION}"


def _with_namespace(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` with apiVersion/kind filled in and metadata.namespace set to `namespace`
    (ValueError when it names another one). The caller's dict is not modified."""
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise ValueError("a Lease body needs metadata.name")
    given = metadata.get("namespace")
    if given and given != namespace:
        raise ValueError(f"body is for namespace {given!r}, not {namespace!r}")
    return {
        "apiVersion": LEASE_API_VERSION,
        "kind": "Lease",
        **body,
        "metadata": {**metadata, "namespace": namespace},
    }


class LeaseStore:
    """get / create / replace / delete of Leases in any namespace through one Kube."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._objects = ObjectStore(
            kube, group=LEASE_GROUP, version=LEASE_VERSION, plural=LEASE_PLURAL
        )

    def collection_path(self, *, namespace: str | None) -> str:
        """The Leases collection path, e.g. for an Informer (None: all namespaces)."""
        return self._objects.collection(namespace=namespace)

    async def get(
        self,
        *,
        namespace: str,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109  # per-request urllib3 timeout
    ) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""
        return await self._objects.get(namespace=namespace, name=name, timeout=timeout)

    async def list(
        self, *, namespace: str | None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._objects.list(namespace=namespace, label_selector=label_selector)

    async def create(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109  # per-request urllib3 timeout
    ) -> dict[str, Any]:
        """Create the Lease; AlreadyExists when it is there already, OutcomeUnknown when it
        may have been created without a reply."""
        return await self._objects.create(
            namespace=namespace, body=_with_namespace(namespace, body), timeout=timeout
        )

    async def replace(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109  # per-request urllib3 timeout
    ) -> dict[str, Any]:
        """PUT the Lease conditionally on body.metadata.resourceVersion, which MUST be set
        (ValueError otherwise, before any request); Conflict when it is stale,
        OutcomeUnknown when it may have landed without a reply."""
        return await self._objects.replace(
            namespace=namespace, body=_with_namespace(namespace, body), timeout=timeout
        )

    async def delete(
        self, *, namespace: str, name: str, resource_version: str | None = None
    ) -> None:
        """Delete the Lease (only at `resource_version` when given: Conflict otherwise).
        A Lease already gone is not an error."""
        await self._objects.delete(
            namespace=namespace, name=name, resource_version=resource_version
        )
