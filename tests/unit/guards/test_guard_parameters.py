"""A guard's parameters are checked when it is built, and each message names the parameter
and shows the value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from leasecron.runtime import Guard, GuardConfigError


def build(**options: Any) -> Guard:
    return Guard(options.pop("name", "send-reminders"), namespace="default", **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "Send Reminders"}, "name 'Send Reminders' must be a DNS name"),
        ({"every": "0.5s"}, r"every \(500ms\) must be a whole number of seconds"),
        ({"every": "soon"}, "every: 'soon' is not a duration"),
        ({"every": "1m", "cron": "* * * * *"}, "give one of them, not both"),
        ({"cron": "0 25 * * *"}, "cron: schedule '0 25 \\* \\* \\*' has an invalid hour field"),
        ({"cron": "0 2 * * *", "time_zone": "Mars/Base"}, "time_zone: .*'Mars/Base'"),
        ({"every": "1m", "time_zone": "UTC"}, r"time_zone \('UTC'\) applies to cron= only"),
        ({"at_most_for": 0}, r"at_most_for \(0s\) must be positive"),
        ({"at_most_for": "1s", "at_least_for": "2s"}, r"at_least_for \(2s\) must not exceed"),
        ({"starting_deadline": "0s"}, r"starting_deadline \(0s\) must be positive"),
        ({"stagger": -1}, r"stagger \(-1s\) must not be negative"),
        ({"stagger": "2s", "starting_deadline": "1s"}, "must be less than starting_deadline"),
        ({"tick": "now"}, r"tick \('now'\) must be a callable"),
        ({"job": "report", "every": "1m"}, "cannot be combined with job='report'"),
        ({"job": "report", "at_most_for": "5m"}, "at_most_for .*job='report'"),
        ({"job": ""}, "must be the name of a ScheduledJob"),
        ({"identity": " "}, "identity ' ' must be 1-200 characters"),
    ],
)
def test_a_bad_parameter_is_refused_with_a_message_naming_it(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(**options)


def test_the_defaults_are_those_of_a_once_per_tick_job() -> None:
    g = build(every="1m")
    assert g.settings.lock is not None
    assert g.settings.lock.at_most_for == timedelta(minutes=15)
    assert g.settings.lock.at_least_for == timedelta(0)
    assert g.settings.lock.keep_alive is True
    assert g.settings.starting_deadline == timedelta(seconds=60)
    assert g.settings.lease == "leasecron-guard-send-reminders"


def test_durations_are_go_strings_seconds_or_timedeltas() -> None:
    g = build(every=90, at_most_for="1h30m", at_least_for=timedelta(seconds=5), keep_alive=False)
    assert g.settings.lock is not None
    assert g.settings.lock.at_most_for == timedelta(minutes=90)
    assert g.settings.lock.keep_alive is False
    assert g.settings.schedule is not None and g.settings.schedule.every == timedelta(seconds=90)


def test_guards_of_one_process_share_one_identity_unless_given_one() -> None:
    assert build().identity == build(name="other").identity
    assert build(identity="replica-1").identity == "replica-1"


def test_a_job_guard_takes_its_schedule_and_lock_settings_from_the_job() -> None:
    g = build(job="nightly-report")
    assert (g.settings.job, g.settings.schedule, g.settings.lock) == ("nightly-report", None, None)


def test_a_guard_is_a_configuration_error_a_value_error_too() -> None:
    assert issubclass(GuardConfigError, ValueError)
