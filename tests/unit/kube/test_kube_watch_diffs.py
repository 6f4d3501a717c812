"""The pure parts of the informer: watch-line parsing and the events implied by a relist."""

from __future__ import annotations

import json
from typing import Any

import pytest

from leasecron.kube._diffs import object_key, parse_watch_line, relist_events, resource_version
from leasecron.kube.errors import Gone, KubeError, Unavailable


def _lease(name: str, version: str, namespace: str | None = "ns") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": version}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"kind": "Lease", "metadata": metadata}


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def test_an_object_is_keyed_by_namespace_and_name() -> None:
    assert object_key(_lease("a", "1")) == ("ns", "a")
    assert object_key(_lease("a", "1", namespace=None)) == (None, "a")
    assert resource_version(_lease("a", "7")) == "7"


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"])
def test_a_watch_line_yields_its_type_and_object(kind: str) -> None:
    assert parse_watch_line(_line(kind, _lease("a", "5"))) == (kind, _lease("a", "5"))


def test_an_expired_watch_raises_gone() -> None:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old: 1 (5)"}

    with pytest.raises(Gone, match="too old"):
        parse_watch_line(_line("ERROR", status))


def test_a_server_error_event_raises_unavailable() -> None:
    status = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}

    with pytest.raises(Unavailable):
        parse_watch_line(_line("ERROR", status))


@pytest.mark.parametrize(
    "line", [b"not json", b'["a"]', b'{"type": "ADDED"}', _line("SURPRISE", _lease("a", "1"))]
)
def test_an_unreadable_watch_line_raises_a_kube_error(line: bytes) -> None:
    with pytest.raises(KubeError):
        parse_watch_line(line)


def test_a_relist_adds_new_modifies_changed_and_deletes_missing_objects() -> None:
    cached = {
        ("ns", "same"): _lease("same", "1"),
        ("ns", "changed"): _lease("changed", "2"),
        ("ns", "gone"): _lease("gone", "3"),
    }
    listed = [_lease("same", "1"), _lease("changed", "9"), _lease("new", "10")]

    events = relist_events(cached, listed)

    assert events == [
        ("MODIFIED", _lease("changed", "9")),
        ("ADDED", _lease("new", "10")),
        ("DELETED", _lease("gone", "3")),
    ]


def test_a_relist_that_changes_nothing_implies_no_events() -> None:
    cached = {("ns", "a"): _lease("a", "1")}

    assert relist_events(cached, [_lease("a", "1")]) == []
