"""Reading and writing Lease records the way client-go's LeaseLock does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leasecron.models.leases import (
    MAX_SANE_DURATION_S,
    LeaseRecord,
    format_micro_time,
    lease_body,
    parse_lease,
    parse_micro_time,
    whole_seconds,
)
from leasecron.models.names import ANNOTATION_TICK

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def client_go_lease(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "42"},
        "spec": {
            "holderIdentity": "pod-a-1234",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-03-01T12:00:00.123456Z",
            "renewTime": "2026-03-01T12:00:05.000000Z",
            "leaseTransitions": 3,
            **spec,
        },
    }


def test_a_lease_written_by_client_go_parses_without_problems() -> None:
    record = parse_lease(client_go_lease())
    assert record == LeaseRecord(
        name="l",
        namespace="ns",
        holder="pod-a-1234",
        lease_duration_s=15,
        acquire_time=T0,
        renew_time=datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC),
        transitions=3,
        resource_version="42",
    )
    assert not record.free


def test_micro_time_is_written_with_six_fraction_digits_and_z() -> None:
    assert format_micro_time(T0) == "2026-03-01T12:00:00.123456Z"
    assert format_micro_time(T0.replace(microsecond=0)) == "2026-03-01T12:00:00.000000Z"


def test_plain_rfc3339_and_offsets_are_read_as_utc() -> None:
    assert parse_micro_time("2026-03-01T13:00:00+01:00") == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert parse_micro_time("2026-03-01T12:00:00Z") == datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_an_empty_lease_as_the_operator_creates_it_is_free_and_not_a_problem() -> None:
    record = parse_lease({"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "1"}})
    assert record.free
    assert record.lease_duration_s is None
    assert record.problems == ()


@pytest.mark.parametrize(
    ("spec", "field", "attribute", "safe"),
    [
        ({"leaseDurationSeconds": -5}, "leaseDurationSeconds", "lease_duration_s", None),
        ({"leaseDurationSeconds": 0}, "leaseDurationSeconds", "lease_duration_s", None),
        ({"leaseDurationSeconds": 2**31 - 1}, "leaseDurationSeconds", "lease_duration_s", None),
        ({"leaseDurationSeconds": "15"}, "leaseDurationSeconds", "lease_duration_s", None),
        ({"leaseDurationSeconds": None}, "leaseDurationSeconds", "lease_duration_s", None),
        ({"acquireTime": "yesterday"}, "acquireTime", "acquire_time", None),
        ({"renewTime": 12}, "renewTime", "renew_time", None),
        ({"leaseTransitions": -1}, "leaseTransitions", "transitions", 0),
        ({"leaseTransitions": "many"}, "leaseTransitions", "transitions", 0),
        ({"holderIdentity": "\x00\x01garbage"}, "holderIdentity", "holder", "\x00\x01garbage"),
        ({"holderIdentity": 7}, "holderIdentity", "holder", "<invalid:int>"),
    ],
)
def test_each_corrupt_field_becomes_a_safe_value_and_one_named_problem(
    spec: dict[str, Any], field: str, attribute: str, safe: object
) -> None:
    record = parse_lease(client_go_lease(**spec))
    assert len(record.problems) == 1
    assert record.problems[0].startswith(field)
    assert getattr(record, attribute) == safe
    assert not record.free  # a garbage holder is still somebody else, never "free"
    # The other fields of the client-go Lease are read as they are.
    intact = parse_lease(client_go_lease())
    others = {"holder", "lease_duration_s", "acquire_time", "renew_time", "transitions"}
    for other in others - {attribute}:
        assert getattr(record, other) == getattr(intact, other), other


def test_a_corrupt_duration_is_unknown_rather_than_zero_or_huge() -> None:
    for value in (-5, 0, MAX_SANE_DURATION_S + 1, "x"):
        assert parse_lease(client_go_lease(leaseDurationSeconds=value)).lease_duration_s is None


def test_a_garbage_tick_annotation_is_a_problem_and_no_tick() -> None:
    obj = client_go_lease()
    obj["metadata"]["annotations"] = {ANNOTATION_TICK: "next tuesday", "other.io/x": "y"}
    record = parse_lease(obj)
    assert record.tick is None
    assert record.problems == (f"annotation {ANNOTATION_TICK} 'next tuesday' is not a tick",)


@pytest.mark.parametrize(
    ("obj", "problem", "holder"),
    [
        (None, "the object is a NoneType, not a Lease", ""),
        ([], "the object is a list, not a Lease", ""),
        ("lease", "the object is a str, not a Lease", ""),
        ({"spec": []}, "spec [] is not an object", ""),
        pytest.param(
            {"metadata": 3, "spec": {"holderIdentity": "x"}},
            "metadata 3 is not an object",
            "x",
            id="metadata-not-an-object",
        ),
    ],
)
def test_objects_that_are_not_leases_at_all_are_reported_and_do_not_raise(
    obj: object, problem: str, holder: str
) -> None:
    record = parse_lease(obj)
    assert problem in record.problems
    # Nothing usable was read: no name to address, no version to write over, no tick.
    assert (record.name, record.namespace, record.resource_version) == ("", "", None)
    assert (record.holder, record.tick, record.transitions) == (holder, None, 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner),
    max_leaves=10,
)
spec_keys = st.sampled_from(
    ["holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions"]
)


@given(
    spec=st.dictionaries(spec_keys, json_values),
    annotations=st.dictionaries(st.sampled_from([ANNOTATION_TICK, "a/b"]), json_values),
    rv=json_values,
)
def test_parse_lease_never_raises_on_anything(
    spec: dict[str, Any], annotations: dict[str, Any], rv: object
) -> None:
    obj = {"metadata": {"name": "l", "annotations": annotations, "resourceVersion": rv}}
    obj["spec"] = spec
    record = parse_lease(obj)
    assert record.lease_duration_s is None or 1 <= record.lease_duration_s <= MAX_SANE_DURATION_S
    assert record.transitions >= 0


def test_lease_body_writes_exactly_the_client_go_fields() -> None:
    record = LeaseRecord(
        name="l",
        namespace="ns",
        holder="me",
        lease_duration_s=15,
        acquire_time=T0,
        renew_time=T0,
        transitions=4,
        tick=datetime(2026, 3, 1, 12, tzinfo=UTC),
        resource_version="42",
    )
    body = lease_body(record, labels={"leasecron.dev/role": "job"})
    assert body == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "l",
            "namespace": "ns",
            "labels": {"leasecron.dev/role": "job"},
            "annotations": {ANNOTATION_TICK: "2026-03-01T12:00:00Z"},
            "resourceVersion": "42",
        },
        "spec": {
            "holderIdentity": "me",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-03-01T12:00:00.123456Z",
            "renewTime": "2026-03-01T12:00:00.123456Z",
            "leaseTransitions": 4,
        },
    }


def test_lease_body_keeps_foreign_labels_annotations_owners_and_spec_fields() -> None:
    base = client_go_lease(strategy="OldestEmulationVersion")
    base["metadata"]["labels"] = {"team": "billing", "leasecron.dev/role": "old"}
    base["metadata"]["annotations"] = {"note": "keep me", ANNOTATION_TICK: "garbage"}
    base["metadata"]["ownerReferences"] = [{"uid": "u1", "kind": "ScheduledJob", "name": "j"}]
    record = parse_lease(base)
    body = lease_body(
        record,
        base=base,
        labels={"leasecron.dev/role": "job"},
        owner_reference={"uid": "u1", "kind": "ScheduledJob", "name": "j"},
    )
    assert body["metadata"]["labels"] == {"team": "billing", "leasecron.dev/role": "job"}
    assert body["metadata"]["annotations"] == {"note": "keep me"}  # the garbage tick is dropped
    assert body["metadata"]["ownerReferences"] == [
        {"uid": "u1", "kind": "ScheduledJob", "name": "j"}
    ]
    assert body["spec"]["strategy"] == "OldestEmulationVersion"
    assert body["metadata"]["resourceVersion"] == "42"


def test_a_record_without_resource_version_builds_a_body_to_create() -> None:
    body = lease_body(LeaseRecord(name="l", namespace="ns"))
    assert "resourceVersion" not in body["metadata"]
    assert body["spec"] == {"holderIdentity": "", "leaseTransitions": 0}


def test_what_lease_body_writes_parses_back_to_the_same_record() -> None:
    record = LeaseRecord(
        name="l",
        namespace="ns",
        holder="me",
        lease_duration_s=2,
        acquire_time=T0,
        renew_time=T0,
        transitions=9,
        tick=datetime(2026, 3, 1, 12, tzinfo=UTC),
        resource_version="7",
    )
    assert parse_lease(lease_body(record)) == record


@pytest.mark.parametrize(("seconds", "whole"), [(0.2, 1), (1.0, 1), (1.01, 2), (900.0, 900)])
def test_durations_become_whole_seconds_rounded_up(seconds: float, whole: int) -> None:
    assert whole_seconds(seconds) == whole


def test_the_creation_time_is_read_from_the_metadata_and_never_a_problem() -> None:
    lease = client_go_lease()
    assert parse_lease(lease).created is None
    lease["metadata"]["creationTimestamp"] = "2026-03-01T11:59:58Z"
    assert parse_lease(lease).created == datetime(2026, 3, 1, 11, 59, 58, tzinfo=UTC)
    lease["metadata"]["creationTimestamp"] = "yesterday"
    record = parse_lease(lease)
    assert record.created is None
    assert not record.problems
