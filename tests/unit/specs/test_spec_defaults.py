"""ScheduledJob specs: defaults from docs/design.md §3, Go-style durations, and the wire form."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from leasecron.models.schedules import Schedule
from leasecron.models.specs import (
    Bucket,
    CatchUpPolicy,
    ScheduledJob,
    ScheduledJobSpec,
    StoreUnavailablePolicy,
    validate_resource,
)


def resource(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly-report", **metadata},
        "spec": spec,
    }


def test_a_minimal_once_per_tick_job_gets_the_documented_defaults() -> None:
    spec = validate_resource(resource({"bucket": "once-per-tick", "schedule": "0 2 * * *"})).spec
    assert spec.bucket is Bucket.ONCE_PER_TICK
    assert spec.time_zone == "UTC"
    assert spec.group == "default"
    assert spec.handler is None
    assert "coordination" not in spec.to_dict()  # removed: one claim engine
    assert (spec.lock.at_most_for, spec.lock.at_least_for, spec.lock.keep_alive) == (
        timedelta(minutes=15),
        timedelta(0),
        True,
    )
    election = spec.election
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (
        timedelta(seconds=15),
        timedelta(seconds=10),
        timedelta(seconds=2),
    )
    assert spec.starting_deadline == timedelta(seconds=60)
    assert (spec.catch_up.policy, spec.catch_up.max_ticks) == (CatchUpPolicy.LATEST, 10)
    assert spec.on_store_unavailable is StoreUnavailablePolicy.SKIP
    assert spec.jitter == timedelta(0)
    assert spec.suspend is False
    assert (spec.history.succeeded, spec.history.failed) == (3, 3)


def test_durations_are_read_from_go_strings_and_written_back_as_go_strings() -> None:
    spec = ScheduledJobSpec.model_validate(
        {
            "bucket": "once-per-tick",
            "schedule": "@every 1s",
            "lock": {"atMostFor": "1h30m", "atLeastFor": "90s"},
            "election": {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"},
        }
    )
    assert spec.lock.at_most_for == timedelta(hours=1, minutes=30)
    assert spec.election.retry_period == timedelta(milliseconds=500)
    wire = spec.to_dict()
    assert wire["lock"] == {"atMostFor": "1h30m", "atLeastFor": "1m30s", "keepAlive": True}
    assert wire["election"]["retryPeriod"] == "500ms"


def test_the_wire_form_validates_back_to_an_equal_spec() -> None:
    original = ScheduledJobSpec(
        bucket=Bucket.ONCE_PER_TICK,
        schedule="*/5 * * * * *",
        time_zone="Europe/Berlin",
        jitter=timedelta(seconds=2),
    )
    again = ScheduledJobSpec.model_validate(original.to_dict(), by_name=False)
    assert again == original
    assert "schedule" in original.to_dict()
    assert "handler" not in original.to_dict()  # None fields are left out


def test_python_names_work_for_building_specs_in_code() -> None:
    spec = ScheduledJobSpec(bucket=Bucket.SINGLE_OWNER, starting_deadline=timedelta(seconds=5))
    assert spec.to_dict()["startingDeadline"] == "5s"


def test_the_handler_defaults_to_the_job_name() -> None:
    unnamed = validate_resource(resource({"bucket": "single-owner"}))
    named = validate_resource(resource({"bucket": "single-owner", "handler": "poll_queue"}))
    assert unnamed.handler_name == "nightly-report"
    assert named.handler_name == "poll_queue"


def test_metadata_identity_is_carried_over() -> None:
    job = validate_resource(
        resource({"bucket": "single-owner"}, namespace="billing", uid="u-1", generation=4)
    )
    assert (job.name, job.namespace, job.uid, job.generation) == (
        "nightly-report",
        "billing",
        "u-1",
        4,
    )
    assert ScheduledJob.from_resource(resource({"bucket": "single-owner"})).namespace is None


def test_the_parsed_schedule_is_read_in_the_jobs_time_zone() -> None:
    spec = validate_resource(
        resource({"bucket": "once-per-tick", "schedule": "0 2 * * *", "timeZone": "Asia/Tokyo"})
    ).spec
    assert spec.parsed_schedule == Schedule.parse("0 2 * * *", time_zone="Asia/Tokyo")
    assert validate_resource(resource({"bucket": "single-owner"})).spec.parsed_schedule is None


def test_to_resource_round_trips_through_validate_resource() -> None:
    job = validate_resource(
        resource({"bucket": "once-per-tick", "schedule": "@hourly"}, namespace="billing")
    )
    again = validate_resource(job.to_resource())
    assert again == job
    assert job.to_resource()["metadata"] == {"name": "nightly-report", "namespace": "billing"}


def test_specs_are_immutable_values() -> None:
    spec = ScheduledJobSpec(bucket=Bucket.SINGLE_OWNER)
    with pytest.raises(ValueError, match="frozen"):
        spec.suspend = True


def test_a_copy_with_another_zone_reads_its_schedule_in_that_zone() -> None:
    spec = ScheduledJobSpec(bucket=Bucket.ONCE_PER_TICK, schedule="0 2 * * *")
    assert spec.parsed_schedule is not None
    moved = spec.model_copy(update={"time_zone": "Asia/Tokyo"})
    assert moved.parsed_schedule == Schedule.parse("0 2 * * *", time_zone="Asia/Tokyo")
