"""When a guard's body may start at the latest, and the Lease it claims on: a plain guard's
call is late from its caller's fire time (not from the tick the fire time snaps to), a job
guard's from the tick; the Lease is the short one, its atLeastFor kept, whatever the run's
atMostFor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.configs import LockConfig
from leasecron.runtime import Guard, GuardConfigError
from leasecron.runtime._guard_settings import (
    DEFAULT_LEASE_DURATION,
    lease_config,
    parse_schedule,
    start_by,
    tick_for,
)

GRID = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=1)


def test_a_plain_guard_fired_off_the_grid_may_start_until_its_own_fire_time_plus_the_grace() -> (
    None
):
    every_20s = parse_schedule(every="20s", cron=None, time_zone=None)
    fired = GRID + timedelta(seconds=11.4)  # a trigger started 11.4 s after the grid
    tick = tick_for(name="g", now=fired, given=fired, schedule=every_20s, snap=True)
    assert tick == GRID
    assert start_by(tick=tick, fired=fired, deadline=GRACE, job=False) == fired + GRACE


def test_a_guard_without_a_fire_time_is_late_from_its_tick() -> None:
    assert start_by(tick=GRID, fired=None, deadline=GRACE, job=False) == GRID + GRACE


def test_a_job_guard_is_late_from_its_tick_by_the_jobs_starting_deadline() -> None:
    fired = GRID + timedelta(seconds=11.4)
    deadline = timedelta(seconds=5)
    assert start_by(tick=GRID, fired=fired, deadline=deadline, job=True) == GRID + deadline


def test_the_guard_lease_is_the_short_one_whatever_the_runs_at_most_for() -> None:
    run = LockConfig(at_most_for=timedelta(minutes=5), at_least_for=3, keep_alive=False)
    lease = lease_config(run, DEFAULT_LEASE_DURATION)
    assert lease.lease_duration_s == 10 and lease.renew_interval_s == pytest.approx(10 / 3)
    assert lease.at_least_for == timedelta(seconds=3) and lease.keep_alive
    held_long = LockConfig(at_most_for=timedelta(minutes=5), at_least_for=timedelta(seconds=30))
    assert lease_config(held_long, DEFAULT_LEASE_DURATION).lease_duration_s == 30


def test_lease_duration_is_a_whole_number_of_seconds_checked_when_the_guard_is_built() -> None:
    assert Guard("g", every="1m", namespace="ns").settings.lease_duration == timedelta(seconds=10)
    short = Guard("g", job="report", namespace="ns", lease_duration="2s")
    assert short.settings.lease_duration == timedelta(seconds=2)
    with pytest.raises(GuardConfigError, match=r"lease_duration \(1\.5s\)"):
        Guard("g", every="1m", namespace="ns", lease_duration=1.5)
