"""Which schedule expressions are accepted, what they tick on, and how refusals read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import croniter
import pytest

from leasecron.models.schedules import Schedule, ScheduleError

START = datetime(2026, 1, 7, 10, 0, 0, tzinfo=UTC)  # a Wednesday


def ticks(
    expression: str, *, count: int, start: datetime = START, zone: str = "UTC"
) -> list[datetime]:
    schedule = Schedule.parse(expression, time_zone=zone)
    found, moment = [], start
    for _ in range(count):
        moment = schedule.next_after(moment)
        found.append(moment)
    return found


def test_five_field_cron_ticks_on_matching_minutes() -> None:
    assert ticks("*/20 * * * *", count=3) == [
        START + timedelta(minutes=20),
        START + timedelta(minutes=40),
        START + timedelta(minutes=60),
    ]


def test_six_field_cron_reads_seconds_first() -> None:
    assert ticks("*/5 * * * * *", count=3) == [START + timedelta(seconds=s) for s in (5, 10, 15)]


def test_six_field_cron_with_fixed_second_ticks_once_a_minute() -> None:
    assert ticks("30 * * * * *", count=2) == [
        START + timedelta(seconds=30),
        START + timedelta(seconds=90),
    ]


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_macros_tick_like_their_cron_equivalent(macro: str, equivalent: str) -> None:
    assert ticks(macro, count=3) == ticks(equivalent, count=3)


def test_both_day_fields_restricted_means_either_day_matches() -> None:
    # Vixie cron and CronJob: the 15th of the month OR any Friday.
    days = [t.day for t in ticks("0 0 15 * 5", count=4)]
    assert days == [9, 15, 16, 23]


def test_next_after_is_strictly_after_a_tick() -> None:
    schedule = Schedule.parse("0 * * * *")
    on_tick = datetime(2026, 1, 7, 11, 0, tzinfo=UTC)
    assert schedule.next_after(on_tick) == on_tick + timedelta(hours=1)
    assert schedule.next_after(on_tick - timedelta(microseconds=1)) == on_tick


def test_results_are_in_utc_whatever_the_zone_of_the_argument() -> None:
    schedule = Schedule.parse("0 12 * * *", time_zone="Asia/Tokyo")
    tokyo_morning = datetime(2026, 1, 7, 9, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
    result = schedule.next_after(tokyo_morning)
    assert result.tzinfo is UTC
    assert result == datetime(2026, 1, 7, 3, 0, tzinfo=UTC)  # noon in Tokyo (UTC+9)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        Schedule.parse("* * * * *").next_after(datetime(2026, 1, 1))


def test_every_is_anchored_at_the_unix_epoch() -> None:
    schedule = Schedule.parse("@every 30s")
    odd_start = datetime(2026, 1, 7, 10, 0, 7, 123, tzinfo=UTC)
    assert schedule.next_after(odd_start) == datetime(2026, 1, 7, 10, 0, 30, tzinfo=UTC)
    seven = Schedule.parse("@every 7s").next_after(odd_start)
    assert (seven - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() % 7 == 0
    assert timedelta(0) < seven - odd_start <= timedelta(seconds=7)


def test_every_ignores_the_time_zone() -> None:
    utc = Schedule.parse("@every 90m")
    kolkata = Schedule.parse("@every 90m", time_zone="Asia/Kolkata")
    assert utc.next_after(START) == kolkata.next_after(START)
    assert utc.every == timedelta(minutes=90)


def test_latest_at_or_before_includes_a_tick_at_the_moment_itself() -> None:
    schedule = Schedule.parse("0 */6 * * *")
    six = datetime(2026, 1, 7, 6, 0, tzinfo=UTC)
    assert schedule.latest_at_or_before(six) == six
    assert schedule.latest_at_or_before(six - timedelta(seconds=1)) == six - timedelta(hours=6)


def test_latest_at_or_before_finds_rare_ticks_years_back() -> None:
    leap_day = Schedule.parse("0 0 29 2 *")
    assert leap_day.latest_at_or_before(START) == datetime(2024, 2, 29, tzinfo=UTC)


def test_ticks_between_excludes_the_start_and_includes_the_end() -> None:
    schedule = Schedule.parse("*/10 * * * *")
    found = schedule.ticks_between(START, START + timedelta(minutes=30), limit=10)
    assert found == [START + timedelta(minutes=m) for m in (10, 20, 30)]


def test_ticks_between_returns_the_earliest_or_newest_within_the_limit() -> None:
    schedule = Schedule.parse("*/10 * * * *")
    end = START + timedelta(hours=1)
    assert schedule.ticks_between(START, end, limit=2) == [
        START + timedelta(minutes=10),
        START + timedelta(minutes=20),
    ]
    assert schedule.ticks_between(START, end, limit=2, newest=True) == [
        START + timedelta(minutes=50),
        START + timedelta(minutes=60),
    ]


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("61 * * * *", "invalid minute field '61'"),
        ("0 24 * * *", "invalid hour field '24'"),
        ("0 0 32 * *", "invalid day-of-month field '32'"),
        ("0 0 * 13 *", "invalid month field '13'"),
        ("0 0 * * MOON", "invalid day-of-week field 'MOON'"),
        ("61 0 * * * *", "invalid second field '61'"),
        ("*/0 * * * *", "invalid minute field"),
        ("0 0 30 2 *", "never matches a date"),
        ("* * * *", "has 4 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("", "is empty"),
        ("@reboot", "not a known macro"),
        ("@every", "needs an interval"),
        ("@every soon", "invalid interval"),
        ("@every 500ms", "whole number of seconds, at least 1s"),
        ("@every 1.5s", "whole number of seconds"),
        ("H * * * *", "hashed and random values are not supported"),
        ("R 0 * * *", "hashed and random values are not supported"),
        ("TZ=Europe/Berlin 0 2 * * *", "use the timeZone field"),
        ("CRON_TZ=UTC 0 2 * * *", "use the timeZone field"),
    ],
)
def test_bad_expressions_are_refused_with_the_reason(expression: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expression)
    assert reason in caught.value.reason
    assert repr(expression) in str(caught.value)
    assert caught.value.expression == expression


def test_month_and_weekday_names_are_accepted() -> None:
    assert ticks("0 9 * JAN,MAR MON-FRI", count=1)[0] == datetime(2026, 1, 8, 9, tzinfo=UTC)


def test_an_unknown_time_zone_is_refused_naming_it() -> None:
    with pytest.raises(ScheduleError, match="Mars/Olympus"):
        Schedule.parse("0 * * * *", time_zone="Mars/Olympus")


def test_schedules_compare_by_expression_and_zone() -> None:
    assert Schedule.parse("0 * * * *") == Schedule.parse("0 * * * *")
    assert Schedule.parse("0 * * * *") != Schedule.parse("0 * * * *", time_zone="Europe/Berlin")
    assert str(Schedule.parse("@every 5s")) == "@every 5s"


def test_a_schedule_asked_again_after_one_instant_answers_without_croniter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedule = Schedule.parse("30 15 10 6 * *")  # 10:15:30 on the 6th: a long search
    after = datetime(2026, 12, 6, 10, 13, 0, tzinfo=UTC)
    first = schedule.next_after(after)
    calls = 0
    real = croniter.croniter.get_next

    def counted(self: croniter.croniter, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(croniter.croniter, "get_next", counted)
    assert [schedule.next_after(after) for _ in range(3)] == [first] * 3
    assert calls == 0
    assert first == datetime(2026, 12, 6, 10, 15, 30, tzinfo=UTC)
    assert schedule.next_after(first) == datetime(2027, 1, 6, 10, 15, 30, tzinfo=UTC)
    assert calls == 1
