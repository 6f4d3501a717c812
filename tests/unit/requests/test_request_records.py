"""Run requests as records: the Pending JobRun a request is, its conditional pickup and
expiry patches, which ticks a backfill runs, and which jobs take requests at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.names import jobrun_name
from leasecron.models.requests import (
    REQUEST_SELECTOR,
    TooManyTicks,
    backfill_ticks,
    expired,
    expiry_patch,
    pickup_patch,
    read_request,
    request_body,
    request_refusal,
    request_tick,
)
from leasecron.models.schedules import Schedule
from leasecron.models.specs import Bucket, Outcome, Trigger

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
HOURLY = Schedule.parse("0 * * * *")


def pending(**metadata: object) -> dict[str, object]:
    body = request_body(
        job="report",
        job_uid="uid-1",
        namespace="billing",
        tick=TICK,
        trigger=Trigger.MANUAL,
        requested_by="alice",
    )
    body["metadata"].update({"resourceVersion": "7", **metadata})
    return body


def test_a_request_is_the_pending_per_tick_jobrun_labelled_with_its_trigger_and_owned() -> None:
    body = pending()
    assert body["metadata"]["name"] == jobrun_name("report", TICK) == "report-20260301020000"
    assert body["metadata"]["labels"]["leasecron.dev/trigger"] == "Manual"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert body["spec"] == {
        "job": "report",
        "tick": "2026-03-01T02:00:00Z",
        "holder": "",
        "trigger": "Manual",
        "requestedBy": "alice",
    }
    assert body["status"]["outcome"] == "Pending"
    assert REQUEST_SELECTOR == "leasecron.dev/trigger in (Manual,Backfill,Retry)"


def test_a_schedule_run_cannot_be_made_a_request() -> None:
    with pytest.raises(ValueError, match="Manual or Backfill"):
        request_body(
            job="r",
            job_uid=None,
            namespace="n",
            tick=TICK,
            trigger=Trigger.SCHEDULE,
            requested_by="",
        )


def test_only_an_unheld_pending_request_is_pending_and_a_scheduled_run_is_no_request() -> None:
    request = read_request(pending())
    assert request is not None and request.pending and request.resource_version == "7"
    held = pending()
    held["spec"]["holder"] = "replica-a"
    assert not read_request(held).pending  # type: ignore[union-attr]
    scheduled = pending()
    del scheduled["spec"]["trigger"]
    assert read_request(scheduled) is None


def test_the_pickup_is_conditional_on_the_version_read_and_makes_the_run_running() -> None:
    request = read_request(pending())
    assert request is not None
    start = TICK + timedelta(seconds=5)
    assert pickup_patch(request, holder="replica-a", token=9, start=start) == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"holder": "replica-a", "fencingToken": 9, "start": "2026-03-01T02:00:05Z"},
        "status": {"outcome": "Running"},
    }


def test_a_request_expires_after_the_starting_deadline_from_its_creation() -> None:
    request = read_request(pending(), created=TICK)
    assert request is not None
    deadline = timedelta(seconds=60)
    assert not expired(request, now=TICK + deadline, starting_deadline=deadline)
    assert expired(request, now=TICK + deadline + timedelta(seconds=1), starting_deadline=deadline)
    patch = expiry_patch(request, end=TICK, message="nobody")
    assert patch["metadata"] == {"resourceVersion": "7"}
    assert patch["status"]["outcome"] == Outcome.MISSED.value


def test_backfill_runs_the_ticks_without_a_run_and_replaces_missed_records() -> None:
    outcomes = {
        jobrun_name("report", TICK): "Succeeded",
        jobrun_name("report", TICK + timedelta(hours=1)): "Missed",
        jobrun_name("report", TICK + timedelta(hours=2)): "Pending",
    }
    plan = backfill_ticks(
        HOURLY,
        start=TICK - timedelta(hours=1),
        end=TICK + timedelta(hours=3),
        limit=10,
        outcomes=outcomes,
        job="report",
    )
    hour = timedelta(hours=1)
    assert plan.run == (TICK - hour, TICK + hour, TICK + 3 * hour)
    assert plan.replaces_missed == {TICK + hour}
    assert plan.on_record == ((TICK, "Succeeded"), (TICK + 2 * hour, "Pending"))


def test_backfill_includes_both_ends_and_refuses_a_range_above_the_limit() -> None:
    plan = backfill_ticks(HOURLY, start=TICK, end=TICK, limit=1, outcomes={}, job="report")
    assert plan.run == (TICK,)
    with pytest.raises(TooManyTicks, match="more than 2 ticks"):
        backfill_ticks(
            HOURLY, start=TICK, end=TICK + timedelta(hours=2), limit=2, outcomes={}, job="report"
        )
    with pytest.raises(ValueError, match="before --from"):
        backfill_ticks(
            HOURLY, start=TICK, end=TICK - timedelta(hours=1), limit=2, outcomes={}, job="r"
        )


def test_only_once_per_tick_jobs_take_requests_and_the_others_say_what_they_do() -> None:
    assert request_refusal(bucket=Bucket.ONCE_PER_TICK, job="report") is None
    owner = request_refusal(bucket=Bucket.SINGLE_OWNER, job="poller")
    assert owner is not None and "no ticks to run" in owner and "takes over" in owner
    every = request_refusal(bucket=Bucket.EVERY_REPLICA, job="cache")
    assert every is not None and "every replica" in every


def test_backfill_leaves_the_ticks_the_schedule_may_still_start_to_it() -> None:
    plan = backfill_ticks(
        HOURLY,
        start=TICK,
        end=TICK + timedelta(hours=5),
        limit=10,
        outcomes={},
        job="report",
        latest=TICK + timedelta(hours=1, minutes=59),
    )
    assert plan.run == (TICK, TICK + timedelta(hours=1))


def test_a_run_now_takes_the_first_second_that_is_not_a_tick_of_the_schedule() -> None:
    at = TICK + timedelta(microseconds=300)
    assert request_tick(HOURLY, now=at) == TICK + timedelta(seconds=1)
    assert request_tick(HOURLY, now=at + timedelta(seconds=5)) == TICK + timedelta(seconds=5)
    assert request_tick(None, now=at) == TICK
    assert request_tick(Schedule.parse("@every 1s"), now=at) is None
