"""Building API paths and naming requests, as pure string functions (no I/O).

`collection_path` and `object_path` build the REST paths of the Kubernetes API conventions;
`describe` turns a method, path and query back into the (verb, resource) pair used as metric
labels, and `target` into the (namespace, name) it addresses. Names are quoted; nothing
here checks that the resource exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, unquote

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _segment(value: str, *, what: str) -> str:
    if not value or "/" in value:
        raise ValueError(f"{what} must be a non-empty name without '/', got {value!r}")
    return quote(value, safe="")


def _prefix(group: str, version: str) -> str:
    _segment(version, what="version")
    if group in ("", "core"):
        return f"/api/{version}"
    return f"/apis/{_segment(group, what='group')}/{version}"


def collection_path(*, group: str, version: str, plural: str, namespace: str | None) -> str:
    """`/api/v1/...` for the core group "", else `/apis/<group>/<version>/...`; cluster-wide
    (all namespaces, or a cluster-scoped kind) when `namespace` is None."""
    base = _prefix(group, version)
    kind = _segment(plural, what="plural")
    if namespace is None:
        return f"{base}/{kind}"
    return f"{base}/namespaces/{_segment(namespace, what='namespace')}/{kind}"


def object_path(
    *,
    group: str,
    version: str,
    plural: str,
    namespace: str | None,
    name: str,
    subresource: str | None = None,
) -> str:
    """The path of one object, or of its `subresource` (e.g. "status")."""
    path = collection_path(group=group, version=version, plural=plural, namespace=namespace)
    path = f"{path}/{_segment(name, what='name')}"
    if subresource is not None:
        path = f"{path}/{_segment(subresource, what='subresource')}"
    return path


def _resource_segments(path: str) -> list[str]:
    """The segments after the group/version prefix; empty for paths outside the REST API."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        return parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[3:]
    return []


def describe(method: str, path: str, query: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(verb, resource) of a request, as Kubernetes audit logs name them.

    verb is get|list|watch|create|update|patch|delete|deletecollection (or the lower-cased
    method for anything else); resource is the plural, with "/<subresource>" when there is one,
    or "" for non-resource paths such as /readyz.
    """
    segments = _resource_segments(path)
    if len(segments) >= 2 and segments[0] == "namespaces" and len(segments) != 2:
        segments = segments[2:]
    resource = segments[0] if segments else ""
    named = len(segments) >= 2
    if len(segments) >= 3:
        resource = f"{resource}/{segments[2]}"
    method = method.upper()
    watching = (query or {}).get("watch") in ("1", "true", "True")
    if method == "GET":
        verb = "watch" if watching else ("get" if named else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return verb, resource


def target(path: str) -> tuple[str | None, str | None]:
    """(namespace, name) a request path addresses; None for what it does not name (a
    collection has no name, a cluster-scoped object no namespace)."""
    segments = _resource_segments(path)
    namespace = None
    if len(segments) >= 2 and segments[0] == "namespaces":
        if len(segments) == 2:  # the Namespace object itself
            return None, unquote(segments[1])
        namespace, segments = unquote(segments[1]), segments[2:]
    name = unquote(segments[1]) if len(segments) >= 2 else None
    return namespace, name


def is_write(method: str) -> bool:
    """True for the methods that change state on the server (POST, PUT, PATCH, DELETE)."""
    return method.upper() in _WRITE_METHODS
