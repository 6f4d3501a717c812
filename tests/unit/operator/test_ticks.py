"""Tick windows carried forward between looks: the same answers as the schedule gives, with
a backwards search only when stepping forward would be long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.schedules import Schedule
from leasecron.operator._ticks import advance, ticks_after

SINCE = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize("expression", ["@every 7s", "*/5 * * * *", "0 3 * * *", "0 3 1 1 *"])
def test_a_window_carried_forward_matches_the_schedule(expression: str) -> None:
    schedule = Schedule.parse(expression, time_zone="Europe/Berlin")
    window = None
    at = SINCE + timedelta(seconds=1)
    for step in (1, 3, 59, 600, 3601, 86400 * 3, 86400 * 40):
        at += timedelta(seconds=step)
        window = advance(schedule, at, since=SINCE, previous=window)
        expected = schedule.latest_at_or_before(at)
        assert window.latest == (expected if expected and expected >= SINCE else None)
        assert window.following == schedule.next_after(at)


def test_ticks_before_since_are_not_the_latest() -> None:
    schedule = Schedule.parse("0 3 * * *")
    window = advance(
        schedule, SINCE + timedelta(hours=2), since=SINCE + timedelta(hours=1), previous=None
    )
    assert window.latest is None
    assert window.following == SINCE + timedelta(hours=3)


def test_a_changed_since_starts_afresh() -> None:
    schedule = Schedule.parse("@every 10s")
    first = advance(schedule, SINCE + timedelta(seconds=35), since=SINCE, previous=None)
    later = advance(
        schedule, SINCE + timedelta(seconds=36), since=SINCE + timedelta(seconds=36), previous=first
    )
    assert first.latest == SINCE + timedelta(seconds=30)
    assert later.latest is None


def test_ticks_after_keeps_the_newest_when_there_are_too_many() -> None:
    schedule = Schedule.parse("@every 1s")
    ticks = ticks_after(schedule, SINCE, SINCE + timedelta(seconds=30), limit=3)
    assert ticks == [SINCE + timedelta(seconds=s) for s in (28, 29, 30)]
    assert ticks_after(schedule, SINCE, SINCE + timedelta(seconds=2), limit=3) == [
        SINCE + timedelta(seconds=1),
        SINCE + timedelta(seconds=2),
    ]
