"""Properties of every schedule, checked by hypothesis around real DST changes, and an
independent brute-force oracle: scan the window minute by minute and apply the rule in the
`leasecron.models.schedules` docstring directly."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasecron.models.schedules import Schedule

# Each zone with the instants near which it changes its offset in 2026, and a quiet one.
CHANGES = {
    "America/New_York": [datetime(2026, 3, 8, 7, tzinfo=UTC), datetime(2026, 11, 1, 6, tzinfo=UTC)],
    "Europe/Berlin": [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 25, 1, tzinfo=UTC)],
    # 02:00 +11:00 -> 01:30 +10:30 in April, 02:00 +10:30 -> 02:30 +11:00 in October.
    "Australia/Lord_Howe": [
        datetime(2026, 4, 4, 15, tzinfo=UTC),
        datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    ],
    "Asia/Kolkata": [datetime(2026, 6, 15, 12, tzinfo=UTC)],
    "UTC": [datetime(2026, 6, 15, 12, tzinfo=UTC)],
}
ZONES = list(CHANGES)
MINUTE = timedelta(minutes=1)

minutes = st.sampled_from(["*", "0", "30", "*/15", "5-10", "0,45", "*/7"])
hours = st.sampled_from(["*", "*/1", "0-23", "1", "2", "1-3", "*/2", "2,14"])
days = st.sampled_from(["*", "*", "1-31", "8,25,29"])
weekdays = st.sampled_from(["*", "*", "0", "1-5"])
cron = st.builds(lambda m, h, d, w: f"{m} {h} {d} * {w}", minutes, hours, days, weekdays)


@st.composite
def zoned_moments(draw: st.DrawFn, *, spread: int = 4 * 3600) -> tuple[str, datetime]:
    """A zone and an instant within a few hours of one of its offset changes."""
    zone = draw(st.sampled_from(ZONES))
    pivot = draw(st.sampled_from(CHANGES[zone]))
    return zone, pivot + timedelta(seconds=draw(st.integers(-spread, spread)))


expressions = st.one_of(
    cron,
    st.sampled_from(["@hourly", "@daily", "*/20 * * * * *", "@every 45s", "@every 7m"]),
)
props = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@props
@given(expression=expressions, where=zoned_moments())
def test_next_after_is_strictly_later_and_ticks_strictly_increase(
    expression: str, where: tuple[str, datetime]
) -> None:
    zone, moment = where
    schedule = Schedule.parse(expression, time_zone=zone)
    previous = moment
    for _ in range(12):
        tick = schedule.next_after(previous)
        assert tick > previous
        assert tick.tzinfo is UTC
        previous = tick


@props
@given(expression=expressions, where=zoned_moments())
def test_latest_at_or_before_and_next_after_bracket_every_moment(
    expression: str, where: tuple[str, datetime]
) -> None:
    zone, moment = where
    schedule = Schedule.parse(expression, time_zone=zone)
    latest = schedule.latest_at_or_before(moment)
    assert latest is not None
    assert latest <= moment < schedule.next_after(latest)
    assert schedule.next_after(latest) == schedule.next_after(moment)


@props
@given(expression=expressions, where=zoned_moments(), hours_long=st.integers(0, 8))
def test_ticks_between_is_next_after_repeated(
    expression: str, where: tuple[str, datetime], hours_long: int
) -> None:
    zone, moment = where
    schedule = Schedule.parse(expression, time_zone=zone)
    upto = moment + timedelta(hours=hours_long)
    expected: list[datetime] = []
    tick = schedule.next_after(moment)
    while tick <= upto and len(expected) < 2000:
        expected.append(tick)
        tick = schedule.next_after(tick)
    assert schedule.ticks_between(moment, upto, limit=2000) == expected
    assert schedule.ticks_between(moment, upto, limit=3, newest=True) == expected[-3:]


def _matcher(expression: str) -> Callable[[datetime], bool]:
    """A plain cron matcher over croniter's parse of the fields (croniter.match is slow)."""
    fields = croniter.expand(expression)[0]
    sets = [None if values == ["*"] else set(values) for values in fields]
    minute, hour, day, month, weekday = sets

    def matches(wall: datetime) -> bool:
        if not all(
            allowed is None or value in allowed
            for allowed, value in ((minute, wall.minute), (hour, wall.hour), (month, wall.month))
        ):
            return False
        by_day = day is not None and wall.day in day
        by_weekday = weekday is not None and (wall.weekday() + 1) % 7 in weekday
        # Both restricted: either matches (Vixie cron); one restricted: that one decides.
        return (day is None and weekday is None) or by_day or by_weekday

    return matches


def _oracle(expression: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Ticks in (start, end] of a 5-field cron, from the rule, by scanning minutes."""
    matches = _matcher(expression)
    margin = timedelta(hours=2)
    first, count = start.replace(second=0, microsecond=0) - margin, (end - start + 2 * margin)
    instants = [first + n * MINUTE for n in range(int(count / MINUTE) + 1)]
    walls = [u.astimezone(zone).replace(tzinfo=None) for u in instants]
    if croniter.expand(expression)[0][1] == ["*"]:
        # Real time: every instant whose wall time matches.
        ticks = {u for u, w in zip(instants, walls, strict=True) if matches(w)}
    else:
        # Wall clock: each matching wall time at its first instant, or the first one after it.
        first_seen: dict[datetime, datetime] = {}
        for u, w in zip(instants, walls, strict=True):
            first_seen.setdefault(w, u)
        ticks = set()
        wall = min(walls)
        while wall <= max(walls):
            if matches(wall):
                seen = first_seen.get(wall)
                if seen is None:  # skipped by a gap
                    later = [u for u, w in zip(instants, walls, strict=True) if w >= wall]
                    seen = later[0] if later else None
                if seen is not None:
                    ticks.add(seen)
            wall += MINUTE
    return sorted(t for t in ticks if start < t <= end)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=cron, where=zoned_moments(spread=3 * 3600), hours_long=st.integers(1, 5))
def test_cron_ticks_match_a_brute_force_scan_of_wall_times(
    expression: str, where: tuple[str, datetime], hours_long: int
) -> None:
    zone, moment = where
    schedule = Schedule.parse(expression, time_zone=zone)
    upto = moment + timedelta(hours=hours_long)
    expected = _oracle(expression, ZoneInfo(zone), moment, upto)
    assert schedule.ticks_between(moment, upto, limit=1000) == expected
