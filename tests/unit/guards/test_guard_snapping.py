"""Snapping a caller's fire time onto the guard's schedule: the latest tick at or before it
of every= (from the Unix epoch), of cron= (in its time zone) or, for a job= guard, of the
ScheduledJob's schedule; a guard without a schedule, or a call without snap, takes the fire
time as it is (to its second)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.clocks import FakeClock
from leasecron.models.schedules import Schedule
from leasecron.models.specs import ScheduledJob
from leasecron.runtime import Guard, GuardConfigError
from leasecron.runtime._guard_engine import Engine
from leasecron.runtime._guard_runtime import GuardRuntime
from leasecron.runtime._guard_settings import parse_schedule, tick_for
from leasecron.runtime._hooks import RunHooks
from leasecron.testing.handlers import scheduled_job

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = NOON + timedelta(hours=1)  # `now`: snapping reads the fire time, not the clock


def snap(given: datetime, schedule: Schedule | None, *, snap: bool = True) -> datetime:
    return tick_for(name="g", now=LATER, given=given, schedule=schedule, snap=snap)


def test_a_fire_time_is_snapped_to_the_latest_every_tick_at_or_before_it() -> None:
    every_10s = parse_schedule(every="10s", cron=None, time_zone=None)
    assert snap(NOON + timedelta(seconds=7.3), every_10s) == NOON
    assert snap(NOON + timedelta(seconds=10), every_10s) == NOON + timedelta(seconds=10)
    assert snap(NOON - timedelta(milliseconds=1), every_10s) == NOON - timedelta(seconds=10)


def test_fire_times_of_two_replicas_within_one_period_snap_to_the_same_tick() -> None:
    every_2s = parse_schedule(every="2s", cron=None, time_zone=None)
    first, second = NOON + timedelta(seconds=0.3), NOON + timedelta(seconds=1.7)
    assert snap(first, every_2s) == snap(second, every_2s) == NOON


def test_a_fire_time_is_snapped_onto_a_cron_grid_in_its_time_zone() -> None:
    two_am_berlin = parse_schedule(every=None, cron="0 2 * * *", time_zone="Europe/Berlin")
    late = datetime(2026, 3, 2, 1, 0, 30, tzinfo=UTC)  # 02:00:30 in Berlin (CET)
    assert snap(late, two_am_berlin) == datetime(2026, 3, 2, 1, 0, tzinfo=UTC)


def test_without_snap_or_without_a_schedule_the_fire_time_is_the_tick_to_its_second() -> None:
    every_10s = parse_schedule(every="10s", cron=None, time_zone=None)
    fired = NOON + timedelta(seconds=7.3)
    assert snap(fired, every_10s, snap=False) == NOON + timedelta(seconds=7)
    assert snap(fired, None) == NOON + timedelta(seconds=7)


def test_a_naive_fire_time_is_refused_when_snapping_too() -> None:
    every_10s = parse_schedule(every="10s", cron=None, time_zone=None)
    with pytest.raises(GuardConfigError, match="naive"):
        snap(datetime(2026, 3, 1, 12, 0, 7), every_10s)


def test_a_job_guard_snaps_onto_the_scheduled_jobs_schedule() -> None:
    job = ScheduledJob.from_resource(scheduled_job("report", schedule="@every 2s"))
    guard = Guard("report", job="report", namespace="ns", identity="r0")
    engine = Engine(
        settings=guard.settings,
        runtime=GuardRuntime(),
        given_kube=None,
        clock=FakeClock(start=LATER),
        hooks=RunHooks(),
    )
    fired = NOON + timedelta(seconds=1.4)
    assert engine._tick(fired, LATER, job, True) == NOON
    assert engine._tick(fired, LATER, job, False) == NOON + timedelta(seconds=1)


def test_snap_is_a_guard_option_checked_when_the_guard_is_built() -> None:
    assert Guard("g", every="1m", namespace="ns", snap=True).settings.snap
    assert not Guard("g", every="1m", namespace="ns").settings.snap
    with pytest.raises(GuardConfigError, match=r"snap \('yes'\)"):
        Guard("g", every="1m", namespace="ns", snap="yes")  # type: ignore[arg-type]
