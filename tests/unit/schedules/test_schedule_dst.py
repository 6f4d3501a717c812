"""Daylight saving time: schedules walked through spring-forward gaps and fall-back folds in
Europe/Berlin, America/New_York and Australia/Lord_Howe (a 30-minute change).

Expected instants are written as local wall times with the offset they have, so each
assertion reads as the rule in the module docstring of `leasecron.models.schedules`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from leasecron.models.schedules import Schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")
HOUR = timedelta(hours=1)


def local(
    zone: ZoneInfo, year: int, month: int, day: int, hour: int, minute: int = 0, *, fold: int = 0
) -> datetime:
    """A wall time in `zone` (fold=1: the second occurrence of a repeated time), as UTC."""
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold).astimezone(UTC)


def walk(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    return schedule.ticks_between(start, end, limit=1000)


# -- fixed wall times: once per day, whatever the clocks do ------------------------------------


def test_berlin_wall_time_in_the_spring_gap_runs_once_at_the_end_of_the_gap() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist that day.
    schedule = Schedule.parse("30 2 * * *", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 3, 28, 12), local(BERLIN, 2026, 3, 30, 12))
    assert found == [local(BERLIN, 2026, 3, 29, 3, 0), local(BERLIN, 2026, 3, 30, 2, 30)]
    assert found[0] == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def test_berlin_wall_time_in_the_autumn_fold_runs_once_at_its_first_occurrence() -> None:
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice.
    schedule = Schedule.parse("30 2 * * *", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 10, 24, 12), local(BERLIN, 2026, 10, 26, 12))
    assert found == [local(BERLIN, 2026, 10, 25, 2, 30, fold=0), local(BERLIN, 2026, 10, 26, 2, 30)]
    assert found[0] == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


def test_new_york_wall_time_in_the_spring_gap_runs_once_at_three() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    schedule = Schedule.parse("30 2 * * *", time_zone="America/New_York")
    found = walk(schedule, local(NEW_YORK, 2026, 3, 7, 12), local(NEW_YORK, 2026, 3, 9, 12))
    assert found == [local(NEW_YORK, 2026, 3, 8, 3, 0), local(NEW_YORK, 2026, 3, 9, 2, 30)]


def test_new_york_wall_time_in_the_fold_runs_once_in_daylight_time() -> None:
    # 2026-11-01: 02:00 EDT falls back to 01:00 EST, so 01:30 happens twice.
    schedule = Schedule.parse("30 1 * * *", time_zone="America/New_York")
    found = walk(schedule, local(NEW_YORK, 2026, 10, 31, 12), local(NEW_YORK, 2026, 11, 2, 12))
    assert found == [
        local(NEW_YORK, 2026, 11, 1, 1, 30, fold=0),
        local(NEW_YORK, 2026, 11, 2, 1, 30),
    ]
    assert found[0] == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)


def test_asked_during_the_second_pass_the_repeated_time_is_not_run_again() -> None:
    schedule = Schedule.parse("30 1 * * *", time_zone="America/New_York")
    second_pass = local(NEW_YORK, 2026, 11, 1, 1, 10, fold=1)
    assert schedule.next_after(second_pass) == local(NEW_YORK, 2026, 11, 2, 1, 30)
    assert schedule.latest_at_or_before(second_pass) == local(NEW_YORK, 2026, 11, 1, 1, 30)


def test_several_skipped_wall_times_collapse_into_one_tick() -> None:
    schedule = Schedule.parse("0,15,30,45 2 * * *", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 3, 29, 0), local(BERLIN, 2026, 3, 29, 12))
    assert found == [local(BERLIN, 2026, 3, 29, 3, 0)]


def test_a_skipped_time_and_the_time_after_the_gap_are_one_tick_not_two() -> None:
    schedule = Schedule.parse("0 2,3 * * *", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 3, 29, 0), local(BERLIN, 2026, 3, 29, 12))
    assert found == [local(BERLIN, 2026, 3, 29, 3, 0)]


def test_a_fixed_hour_schedule_with_minute_steps_keeps_the_first_pass_of_the_fold() -> None:
    schedule = Schedule.parse("*/20 2 * * *", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 10, 25, 0), local(BERLIN, 2026, 10, 25, 12))
    assert found == [local(BERLIN, 2026, 10, 25, 2, m, fold=0) for m in (0, 20, 40)]


# -- every-hour schedules follow real time -----------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "start"),
    [
        (BERLIN, datetime(2026, 3, 28, 22, tzinfo=UTC)),
        (BERLIN, datetime(2026, 10, 24, 22, tzinfo=UTC)),
        (NEW_YORK, datetime(2026, 3, 8, 4, tzinfo=UTC)),
        (NEW_YORK, datetime(2026, 11, 1, 3, tzinfo=UTC)),
    ],
)
def test_hourly_stays_hourly_in_real_time_across_a_change(zone: ZoneInfo, start: datetime) -> None:
    schedule = Schedule.parse("0 * * * *", time_zone=str(zone))
    found = walk(schedule, start, start + 6 * HOUR)
    assert found == [start + n * HOUR for n in range(1, 7)]
    offsets = {t.astimezone(zone).utcoffset() for t in found}
    assert len(offsets) == 2  # the walk really crossed the change


def test_hourly_in_the_berlin_fold_runs_on_both_passes_of_two_oclock() -> None:
    schedule = Schedule.parse("@hourly", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 10, 25, 1, 30), local(BERLIN, 2026, 10, 25, 3, 30))
    assert found == [
        local(BERLIN, 2026, 10, 25, 2, 0, fold=0),
        local(BERLIN, 2026, 10, 25, 2, 0, fold=1),
        local(BERLIN, 2026, 10, 25, 3, 0),
    ]


def test_half_hourly_skips_nothing_and_repeats_nothing_in_new_york_autumn() -> None:
    schedule = Schedule.parse("*/30 * * * *", time_zone="America/New_York")
    start = local(NEW_YORK, 2026, 11, 1, 0, 0)
    found = walk(schedule, start, start + 4 * HOUR)
    assert found == [start + n * timedelta(minutes=30) for n in range(1, 9)]


def test_hourly_does_not_invent_a_tick_for_the_skipped_hour() -> None:
    schedule = Schedule.parse("15 * * * *", time_zone="America/New_York")
    found = walk(schedule, local(NEW_YORK, 2026, 3, 8, 0, 30), local(NEW_YORK, 2026, 3, 8, 4, 0))
    walls = [t.astimezone(NEW_YORK).strftime("%H:%M") for t in found]
    assert walls == ["01:15", "03:15"]


def test_seconds_schedule_runs_through_the_fold_without_a_pause() -> None:
    schedule = Schedule.parse("*/10 * * * * *", time_zone="Europe/Berlin")
    change = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)
    found = walk(schedule, change - timedelta(seconds=30), change + timedelta(seconds=30))
    assert found == [change + timedelta(seconds=s) for s in range(-20, 31, 10)]


# -- a 30-minute change ------------------------------------------------------------------------


def test_lord_howe_half_hour_gap_moves_the_skipped_time_to_the_end_of_the_gap() -> None:
    # 2026-10-04: 02:00 +10:30 jumps to 02:30 +11:00.
    schedule = Schedule.parse("15 2 * * *", time_zone="Australia/Lord_Howe")
    found = walk(schedule, local(LORD_HOWE, 2026, 10, 3, 12), local(LORD_HOWE, 2026, 10, 4, 12))
    assert found == [local(LORD_HOWE, 2026, 10, 4, 2, 30)]


def test_lord_howe_half_hour_fold_runs_the_repeated_time_once() -> None:
    # 2026-04-05: 02:00 +11:00 falls back to 01:30 +10:30.
    schedule = Schedule.parse("45 1 * * *", time_zone="Australia/Lord_Howe")
    found = walk(schedule, local(LORD_HOWE, 2026, 4, 4, 12), local(LORD_HOWE, 2026, 4, 5, 12))
    assert found == [local(LORD_HOWE, 2026, 4, 5, 1, 45, fold=0)]


# -- the end of a fall-back fold: the first wall time after the repeated stretch ----------------


@pytest.mark.parametrize(
    "moment",
    [
        local(BERLIN, 2026, 10, 25, 2, 10, fold=1),
        datetime(2026, 10, 25, 1, 59, 59, tzinfo=UTC),  # 02:59:59 CET, the fold's last second
        datetime(2026, 10, 25, 1, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_a_wall_time_at_the_end_of_the_berlin_fold_ticks_when_the_fold_ends(
    moment: datetime,
) -> None:
    # 03:00 first occurs at the end of the fold (03:00 CET = 02:00 UTC): asked anywhere on the
    # second pass, up to its very last microsecond, it is the next tick, not tomorrow's.
    schedule = Schedule.parse("0 3 * * *", time_zone="Europe/Berlin")
    assert schedule.next_after(moment) == datetime(2026, 10, 25, 2, 0, tzinfo=UTC)
    assert schedule.latest_at_or_before(moment) == local(BERLIN, 2026, 10, 24, 3, 0)


def test_the_last_second_of_the_fold_ticks_on_the_first_pass_only() -> None:
    # 02:59:59 is the last repeated wall time: asked on the second pass, the next tick is the
    # next day's, and the latest is the first pass's (00:59:59 UTC), never the second's.
    schedule = Schedule.parse("59 59 2 * * *", time_zone="Europe/Berlin")
    second_pass = local(BERLIN, 2026, 10, 25, 2, 30, fold=1)
    assert schedule.next_after(second_pass) == local(BERLIN, 2026, 10, 26, 2, 59) + timedelta(
        seconds=59
    )
    assert schedule.latest_at_or_before(second_pass) == datetime(
        2026, 10, 25, 0, 59, 59, tzinfo=UTC
    )


def test_a_walk_over_the_whole_berlin_fold_pauses_on_the_second_pass_and_resumes_at_three() -> None:
    schedule = Schedule.parse("0 * 2,3 * * *", time_zone="Europe/Berlin")
    found = walk(schedule, local(BERLIN, 2026, 10, 25, 2, 58), local(BERLIN, 2026, 10, 25, 3, 2))
    assert found == [
        local(BERLIN, 2026, 10, 25, 2, 59, fold=0),
        local(BERLIN, 2026, 10, 25, 3, 0),
        local(BERLIN, 2026, 10, 25, 3, 1),
        local(BERLIN, 2026, 10, 25, 3, 2),
    ]
    assert found[1] - found[0] == timedelta(minutes=61)


def test_new_york_two_oclock_ticks_exactly_when_its_fold_ends() -> None:
    schedule = Schedule.parse("0 2 * * *", time_zone="America/New_York")
    last_second = local(NEW_YORK, 2026, 11, 1, 1, 59, fold=1) + timedelta(seconds=59)
    assert schedule.next_after(last_second) == datetime(2026, 11, 1, 7, 0, tzinfo=UTC)


def test_lord_howe_two_oclock_ticks_exactly_when_its_half_hour_fold_ends() -> None:
    # 2026-04-05: 02:00 +11:00 falls back to 01:30 +10:30; the fold ends at 02:00 +10:30.
    schedule = Schedule.parse("0 2 * * *", time_zone="Australia/Lord_Howe")
    last_second = local(LORD_HOWE, 2026, 4, 5, 1, 59, fold=1) + timedelta(seconds=59)
    assert schedule.next_after(last_second) == datetime(2026, 4, 4, 15, 30, tzinfo=UTC)
