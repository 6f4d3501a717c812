"""`ObjectStore`: get/list/create/replace/patch/delete of one kind of object, as raw dicts.

The generic CRUD the coordination and runtime layers need for Leases, JobRuns and
ScheduledJob status, with the two rules leasecron lives by built in: `replace` refuses a body
without metadata.resourceVersion (never a blind overwrite), and a conditional delete sends the
resourceVersion as a precondition. It does not validate object contents: the API server does.
"""

from __future__ import annotations

from typing import Any

from leasecron.kube._paths import collection_path, object_path
from leasecron.kube.clients import Kube
from leasecron.kube.errors import NotFound

MERGE_PATCH = "application/merge-patch+json"


def _metadata(body: dict[str, Any]) -> dict[str, Any]:
    metadata = body.get("metadata")
    if not isinstance(metadata, dict):
        raise ValueError("body.metadata must be a mapping")
    return metadata


class ObjectStore:
    """CRUD of one resource (`group`, `version`, `plural`) through `kube`. Errors are the
    KubeError subclasses of `leasecron.kube.errors`."""

    def __init__(self, kube: Kube, *, group: str, version: str, plural: str) -> None:
        self.kube = kube
        self.group = group
        self.version = version
        self.plural = plural

    def collection(self, *, namespace: str | None) -> str:
        return collection_path(
            group=self.group, version=self.version, plural=self.plural, namespace=namespace
        )

    def path(self, *, namespace: str | None, name: str, subresource: str | None = None) -> str:
        return object_path(
            group=self.group,
            version=self.version,
            plural=self.plural,
            namespace=namespace,
            name=name,
            subresource=subresource,
        )

    async def get(
        self,
        *,
        namespace: str | None,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109  # per-request urllib3 timeout
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist. `timeout`: seconds for the request
        (default: the Kube's request_timeout)."""
        try:
            path = self.path(namespace=namespace, name=name)
            return await self.kube.request("GET", path, timeout=timeout)
        except NotFound:
            return None

    async def list(
        self, *, namespace: str | None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """All objects (one request; use an Informer to follow them)."""
        query = {"labelSelector": label_selector} if label_selector else None
        result = await self.kube.request("GET", self.collection(namespace=namespace), query=query)
        return list(result.get("items") or [])

    async def create(
        self,
        *,
        namespace: str | None,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109  # per-request urllib3 timeout
    ) -> dict[str, Any]:
        """POST `body`; AlreadyExists when the name is taken."""
        _metadata(body)
        path = self.collection(namespace=namespace)
        return await self.kube.request("POST", path, body=body, timeout=timeout)

    async def replace(
        self,
        *,
        namespace: str | None,
        body: dict[str, Any],
        subresource: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  # per-request urllib3 timeout
    ) -> dict[str, Any]:
        """PUT `body`, conditional on its metadata.resourceVersion (ValueError, before any
        request, when it is missing); Conflict when that version is stale."""
        metadata = _metadata(body)
        if not metadata.get("resourceVersion"):
            raise ValueError("replace needs body.metadata.resourceVersion: no blind overwrites")
        name = metadata.get("name")
        if not name:
            raise ValueError("replace needs body.metadata.name")
        path = self.path(namespace=namespace, name=str(name), subresource=subresource)
        return await self.kube.request("PUT", path, body=body, timeout=timeout)

    async def patch(
        self,
        *,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch. Include metadata.resourceVersion in `patch` to make it
        conditional (Conflict when stale)."""
        path = self.path(namespace=namespace, name=name, subresource=subresource)
        return await self.kube.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    async def delete(
        self, *, namespace: str | None, name: str, resource_version: str | None = None
    ) -> None:
        """Delete; with `resource_version`, only that version (Conflict otherwise). An object
        already gone is not an error."""
        body: dict[str, Any] | None = None
        if resource_version is not None:
            body = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "preconditions": {"resourceVersion": resource_version},
            }
        try:
            await self.kube.request("DELETE", self.path(namespace=namespace, name=name), body=body)
        except NotFound:
            return
