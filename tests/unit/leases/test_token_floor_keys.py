"""Token-floor tombstones: their annotation keys are valid Kubernetes annotation keys for any
job name, distinct per job, and the highest token is read from every record of a job."""

from __future__ import annotations

import re
from typing import Any

import pytest

from leasecron.coordination.floors import (
    FLOORS_LEASE,
    floors_lock,
    highest_token,
    tombstone,
    tombstone_key,
)
from leasecron.coordination.resourcelocks import LEASE_SELECTOR
from leasecron.models.leases import LeaseRecord, with_annotations

UNUSED_STORE: Any = object()
"""Stands for the store of a lock that only builds bodies here (sends nothing)."""

# k8s.io/apimachinery IsQualifiedName: a DNS-1123 subdomain prefix, "/", a name part of at
# most 63 characters that starts and ends alphanumeric.
NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def assert_valid_key(key: str) -> None:
    prefix, _, name = key.partition("/")
    assert prefix == "leasecron.dev"
    assert NAME_PART.match(name), key


def test_a_short_job_name_is_kept_whole_in_its_key() -> None:
    assert tombstone_key("nightly-report") == "leasecron.dev/token-floor.nightly-report"


@pytest.mark.parametrize(
    "job",
    [
        "a",
        "x" * 51,  # the longest that fits whole
        "x" * 52,
        "billing.eu-west-1.nightly-report-" + "y" * 200,
        "z" * 253,
        "ends-with-dot-after-cut." + "q" * 100,
    ],
)
def test_every_job_name_gives_a_valid_annotation_key(job: str) -> None:
    assert_valid_key(tombstone_key(job))


def test_long_names_that_share_a_prefix_get_distinct_keys() -> None:
    first, second = "report-" + "a" * 80, "report-" + "a" * 79 + "b"
    assert tombstone_key(first) != tombstone_key(second)
    assert tombstone_key(first) == tombstone_key(first)


def test_a_key_that_fits_whole_is_not_hashed_and_one_that_does_not_is() -> None:
    assert tombstone_key("x" * 51).endswith("x" * 51)
    assert not tombstone_key("x" * 52).endswith("x" * 52)


def test_an_empty_job_name_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="job"):
        tombstone_key("")


def floors_lease_body(namespace: str, annotations: dict[str, str]) -> dict[str, Any]:
    """The floors Lease `record_floor` creates, carrying `annotations`."""
    record = LeaseRecord(name=FLOORS_LEASE, namespace=namespace)
    return with_annotations(
        floors_lock(UNUSED_STORE, namespace).body(record, base=None), annotations
    )


def test_the_floors_lease_is_outside_what_locks_and_electors_watch() -> None:
    body = floors_lease_body("billing", {})
    labels = body["metadata"]["labels"]
    assert body["metadata"]["name"] == FLOORS_LEASE
    assert labels["leasecron.dev/role"] == "floors"
    assert "floors" not in LEASE_SELECTOR
    assert "ownerReferences" not in body["metadata"]
    assert body["spec"] == {"holderIdentity": "", "leaseTransitions": 0}  # never held


def test_the_highest_token_comes_from_runs_status_and_tombstone() -> None:
    floors = floors_lease_body("ns", {tombstone_key("job"): "7", tombstone_key("other"): "99"})
    runs = [
        {"spec": {"job": "job", "fencingToken": 4}},
        {"spec": {"job": "job"}},  # a Missed record written by the operator carries none
        {"spec": {"job": "other", "fencingToken": 50}},  # another job's run
    ]
    status = {"status": {"lastRun": {"fencingToken": 9}}}
    assert highest_token(job="job", runs=runs, scheduled_job=status, floors=floors) == 9
    assert highest_token(job="job", runs=runs, floors=floors) == 7
    assert highest_token(job="job", runs=runs) == 4
    assert highest_token(job="job") == 0


def test_unreadable_records_count_as_no_token() -> None:
    floors = floors_lease_body("ns", {tombstone_key("job"): "lots"})
    runs = [{"spec": {"job": "job", "fencingToken": True}}, {"spec": "?"}]
    status = {"status": {"lastRun": {"fencingToken": -3}}}
    assert tombstone(floors, job="job") == 0
    assert highest_token(job="job", runs=runs, scheduled_job=status, floors=floors) == 0
