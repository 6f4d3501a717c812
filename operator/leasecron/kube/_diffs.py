"""Pure pieces of the informer: object keys, watch-line parsing, and the events a relist
implies. No I/O and no clocks, so they are unit-tested without an API server.

What this module does not do: order events across keys beyond "as listed, then deletions".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from leasecron.kube.errors import KubeError, status_error

Key = tuple[str | None, str]

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
SYNCED = "SYNCED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"
_OBJECT_EVENTS = frozenset({ADDED, MODIFIED, DELETED})


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def object_key(obj: Mapping[str, Any]) -> Key:
    """(namespace or None for cluster-scoped objects, name)."""
    metadata = _metadata(obj)
    namespace = metadata.get("namespace")
    return (str(namespace) if namespace else None, str(metadata.get("name") or ""))


def resource_version(obj: Mapping[str, Any]) -> str:
    """metadata.resourceVersion, or "" when absent."""
    return str(_metadata(obj).get("resourceVersion") or "")


def parse_watch_line(line: bytes) -> tuple[str, dict[str, Any]]:
    """(type, object) of one watch line: ADDED/MODIFIED/DELETED with the object, or BOOKMARK
    with an object carrying only metadata.resourceVersion. An ERROR event raises the KubeError
    its Status names (Gone for 410); anything unreadable raises a plain KubeError."""
    try:
        event = json.loads(line)
    except ValueError as e:
        raise KubeError(f"unreadable watch line: {line[:200]!r}") from e
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise KubeError(f"unexpected watch line: {line[:200]!r}")
    kind, obj = str(event.get("type")), event["object"]
    if kind == ERROR:
        code = int(obj.get("code") or 0)
        if not code:
            raise KubeError(f"watch error without a code: {obj.get('message')!r}")
        raise status_error(code, json.dumps(obj).encode())
    if kind != BOOKMARK and kind not in _OBJECT_EVENTS:
        raise KubeError(f"unknown watch event type {kind!r}")
    return kind, obj


def relist_events(
    cached: Mapping[Key, Mapping[str, Any]], listed: Iterable[dict[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """The events that turn `cached` into `listed`: ADDED for new keys, MODIFIED for keys
    whose resourceVersion changed, then DELETED (with the last known object) for keys gone."""
    events: list[tuple[str, dict[str, Any]]] = []
    seen: set[Key] = set()
    for obj in listed:
        key = object_key(obj)
        seen.add(key)
        previous = cached.get(key)
        if previous is None:
            events.append((ADDED, obj))
        elif resource_version(previous) != resource_version(obj):
            events.append((MODIFIED, obj))
    for key, previous in cached.items():
        if key not in seen:
            events.append((DELETED, dict(previous)))
    return events
