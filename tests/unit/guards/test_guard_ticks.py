"""Which tick a guarded call claims: the caller's fire time when known (truncated to its
second), else the latest tick of every= (aligned to the Unix epoch) or cron= (in its time
zone, through daylight saving changes) at or before now; an error when nothing says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from leasecron.runtime import GuardConfigError
from leasecron.runtime._guard_settings import fire_time, parse_schedule, tick_for

BERLIN = ZoneInfo("Europe/Berlin")


def latest(now: datetime, **schedule: str | float | None) -> datetime:
    parsed = parse_schedule(
        every=schedule.get("every"),
        cron=schedule.get("cron"),  # type: ignore[arg-type]
        time_zone=schedule.get("time_zone"),  # type: ignore[arg-type]
    )
    return tick_for(name="g", now=now, given=None, schedule=parsed)


def test_every_ticks_are_aligned_to_the_unix_epoch_whatever_the_call_time() -> None:
    now = datetime(2026, 3, 1, 12, 0, 59, 999000, tzinfo=UTC)
    assert latest(now, every="1m") == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert latest(now, every=45) == datetime(2026, 3, 1, 12, 0, 45, tzinfo=UTC)
    odd = latest(now, every="7s")  # 1772366456 = 7 x 253195208: a multiple since the epoch
    assert odd == datetime(2026, 3, 1, 12, 0, 56, tzinfo=UTC)
    assert int(odd.timestamp()) % 7 == 0


def test_a_call_exactly_on_a_tick_claims_that_tick() -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert latest(now, every="1m") == now


def test_cron_ticks_are_read_in_the_time_zone() -> None:
    now = datetime(2026, 7, 1, 1, 30, tzinfo=UTC)  # 03:30 in Berlin (CEST)
    tick = latest(now, cron="0 2 * * *", time_zone="Europe/Berlin")
    assert tick == datetime(2026, 7, 1, 2, 0, tzinfo=BERLIN).astimezone(UTC)


def test_a_cron_wall_time_in_a_spring_forward_gap_ticks_at_the_first_instant_after_it() -> None:
    # 2026-03-29: Berlin goes from 02:00 CET to 03:00 CEST; 02:30 does not exist.
    now = datetime(2026, 3, 29, 3, 10, tzinfo=BERLIN)
    tick = latest(now, cron="30 2 * * *", time_zone="Europe/Berlin")
    assert tick == datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN).astimezone(UTC)


def test_a_cron_wall_time_repeated_by_a_fold_ticks_at_its_first_occurrence_only() -> None:
    # 2026-10-25: Berlin repeats 02:00-03:00; 02:30 happens twice.
    second_pass = datetime(2026, 10, 25, 2, 45, tzinfo=BERLIN, fold=1)
    tick = latest(second_pass, cron="30 2 * * *", time_zone="Europe/Berlin")
    assert tick == datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN, fold=0).astimezone(UTC)


def test_the_callers_fire_time_wins_over_the_schedule_and_is_truncated_to_its_second() -> None:
    schedule = parse_schedule(every="1m", cron=None, time_zone=None)
    fired = datetime(2026, 3, 1, 13, 0, 0, 400000, tzinfo=BERLIN)
    now = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    tick = tick_for(name="g", now=now, given=fired, schedule=schedule)
    assert tick == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert tick.tzinfo is UTC


def test_the_tick_callable_gives_the_fire_time_and_none_falls_back_to_the_schedule() -> None:
    fired = datetime(2026, 1, 1, tzinfo=UTC)
    assert fire_time(None, lambda: fired) == fired
    assert fire_time(fired + timedelta(hours=1), lambda: fired) == fired + timedelta(hours=1)
    assert fire_time(None, lambda: None) is None
    assert fire_time(None, None) is None


def test_a_naive_fire_time_is_refused() -> None:
    with pytest.raises(GuardConfigError, match="naive: pass an aware datetime"):
        tick_for(name="g", now=datetime.now(UTC), given=datetime(2026, 1, 1), schedule=None)


def test_a_call_with_no_fire_time_and_no_schedule_says_how_to_give_one() -> None:
    with pytest.raises(GuardConfigError, match="give the guard every=, cron=, job= or a tick="):
        tick_for(name="g", now=datetime.now(UTC), given=None, schedule=None)
