"""Wall-clock arithmetic in IANA time zones: where a zone's UTC offset changes, and which instant
a local wall time names when daylight saving time skips or repeats it.

Owns the few questions `schedules` needs answered; it does not decide which ticks run (that is
the schedule's policy). Offsets are read from `zoneinfo` one instant at a time, because the
module does not expose its transition table. Changes are found by probing every few hours and
bisecting to the second, which assumes a zone never changes its offset twice within
`PROBE_STEP` (true of every zone in the IANA database, whose changes are weeks apart).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PROBE_STEP = timedelta(hours=6)
SECOND = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def load_zone(name: str) -> ZoneInfo:
    """The zone called `name`; ValueError with a readable reason when there is none."""
    if not name or name != name.strip():
        raise ValueError("is not an IANA time zone name (for example UTC or Europe/Berlin)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as e:
        raise ValueError(
            "is not a known IANA time zone name (for example UTC, Europe/Berlin, America/New_York)"
        ) from e


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    """The zone's UTC offset at `instant` (aware)."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always knows its offset
    return offset


def wall_time(zone: ZoneInfo, instant: datetime) -> datetime:
    """The naive local wall time of `instant` in `zone`."""
    return instant.astimezone(zone).replace(tzinfo=None)


def first_change(
    zone: ZoneInfo, *, after: datetime, upto: datetime, offset: timedelta
) -> datetime | None:
    """The first instant in (after, upto] whose offset is not `offset` (the offset at `after`),
    to the second, in UTC; None when the offset holds over the whole interval."""
    probe = after
    while probe < upto:
        ahead = min(probe + PROBE_STEP, upto)
        if offset_at(zone, ahead) != offset:
            return _bisect(zone, low=probe, high=ahead, offset=offset)
        probe = ahead
    return None


def _bisect(zone: ZoneInfo, *, low: datetime, high: datetime, offset: timedelta) -> datetime:
    """The first whole second in (low, high] with an offset other than `offset`, given that
    `low` has `offset` and `high` does not. Offsets change on whole seconds."""
    lo = math.floor((low - _EPOCH).total_seconds())
    hi = math.ceil((high - _EPOCH).total_seconds())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset_at(zone, _EPOCH + timedelta(seconds=mid)) == offset:
            lo = mid
        else:
            hi = mid
    return _EPOCH + timedelta(seconds=hi)


def first_instant(zone: ZoneInfo, wall: datetime) -> datetime:
    """The first instant (UTC) whose local wall time in `zone` is the naive `wall`.

    A wall time repeated by a fall-back fold names its first occurrence. A wall time skipped by
    a spring-forward gap names the first instant after the gap (the instant of the change).
    """
    earlier = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if wall_time(zone, earlier) == wall:
        return earlier
    # In a gap, fold=0 and fold=1 read the wall time with the offsets before and after the
    # change; the change itself lies between the two readings.
    other = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    low, high = min(earlier, other), max(earlier, other)
    change = first_change(zone, after=low, upto=high, offset=offset_at(zone, low))
    assert change is not None  # a wall time that maps nowhere lies in a gap, which has a change
    return change


def fold_end(zone: ZoneInfo, instant: datetime) -> datetime:
    """For an instant on the second pass of a fold: the naive wall time at which the fold ends,
    that is, the first wall time after the repeated stretch."""
    local = instant.astimezone(zone)
    before = local.replace(fold=0).utcoffset()
    after = local.utcoffset()
    assert before is not None and after is not None and before > after
    change = first_change(zone, after=instant - (before - after), upto=instant, offset=before)
    assert change is not None  # the second pass starts at a change at most one fold earlier
    return (change + before).replace(tzinfo=None)


def on_second_pass(zone: ZoneInfo, instant: datetime) -> bool:
    """Whether `instant` reads a wall time that the zone already showed once (a fold)."""
    return instant.astimezone(zone).fold == 1


def floor_second(value: datetime) -> datetime:
    return value.replace(microsecond=0)
