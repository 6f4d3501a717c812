"""Fire times the scheduler integrations claim: a scheduler's fire time handed to the guard
(which snaps it onto its grid), guard names from job ids, and what a scheduler's timing
settings become."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.integrations import _firing

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_the_fire_time_is_handed_to_the_guard_as_it_is_and_naive_means_local_time() -> None:
    # The guard snaps it onto its schedule (tests/unit/guards/test_guard_snapping.py).
    local = datetime(2026, 3, 1, 12, 0, 5, 300000)
    assert _firing.tick_of(_firing.Firing(at=local)) == local.astimezone(UTC)
    assert _firing.tick_of(None) is None


@pytest.mark.parametrize(
    ("job_id", "name"),
    [
        ("send_reminders", "send-reminders"),
        ("Billing.Send_Reminders", "billing.send-reminders"),
        ("report:nightly", "report-nightly"),
    ],
)
def test_a_guard_is_named_after_the_job_id_in_lease_name_characters(job_id: str, name: str) -> None:
    assert _firing.guard_name(job_id) == name


def test_a_generated_job_id_is_refused_because_replicas_would_not_share_the_guard() -> None:
    with pytest.raises(ValueError, match="give the job an id="):
        _firing.guard_name("0f1e2d3c4b5a69788796a5b4c3d2e1f0")


def test_the_schedulers_grace_becomes_the_starting_deadline_unless_one_is_given() -> None:
    found = _firing.Firing(at=NOON, starting_deadline=timedelta(seconds=5))
    assert _firing.with_firing_defaults({}, found)["starting_deadline"] == timedelta(seconds=5)
    given = _firing.with_firing_defaults({"starting_deadline": "1m"}, found)
    assert given["starting_deadline"] == "1m"


def test_an_interval_trigger_becomes_the_grid_when_the_guard_has_no_schedule() -> None:
    found = _firing.Firing(at=NOON, interval=timedelta(seconds=30))
    assert _firing.with_firing_defaults({}, found)["every"] == timedelta(seconds=30)
    assert "every" not in _firing.with_firing_defaults({"cron": "* * * * *"}, found)
    sub_second = _firing.Firing(at=NOON, interval=timedelta(milliseconds=500))
    assert "every" not in _firing.with_firing_defaults({}, sub_second)


def test_a_job_guard_takes_its_timing_from_the_scheduled_job_only() -> None:
    found = _firing.Firing(
        at=NOON, starting_deadline=timedelta(seconds=5), interval=timedelta(seconds=30)
    )
    assert _firing.with_firing_defaults({"job": "nightly-report"}, found) == {
        "job": "nightly-report"
    }


def test_the_announced_fire_time_is_seen_only_inside_the_call() -> None:
    assert _firing.fire_time() is None
    with _firing.firing(_firing.Firing(at=NOON, job_id="report")):
        assert _firing.fire_time() == _firing.Firing(at=NOON, job_id="report")
    assert _firing.fire_time() is None


def test_a_jobs_own_guard_options_override_those_given_for_every_job() -> None:
    found = _firing.Firing(at=NOON, options={"namespace": "billing", "at_most_for": "5m"})
    merged = _firing.with_firing_defaults({"at_most_for": "1h"}, found)
    assert merged == {"namespace": "billing", "at_most_for": "1h"}
