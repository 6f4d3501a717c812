"""Tick arithmetic the operator repeats for every job on every look, made cheap by carrying
the last answer forward.

Owns `TickWindow` (for one schedule and one moment: the latest tick at or before it, not
earlier than `since`, and the first tick after it) and `advance`, which computes a window
from the previous one: unchanged while the moment stays inside it, a few steps forward when
it moved on, and from scratch only the first time. `Schedule.latest_at_or_before` searches
backwards and can cost many cron evaluations for a rare schedule (a yearly one); with 1000
jobs that matters, so this module looks back from the moment by the schedule's own period
(estimated from two ticks) instead.

Pure functions over `models.schedules.Schedule`; no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from leasecron.models.schedules import Schedule

STEP_LIMIT = 4
"""At most this many ticks are stepped through before looking back from the moment instead."""
_EPSILON = timedelta(microseconds=1)


@dataclass(frozen=True, kw_only=True)
class TickWindow:
    """`latest` is the newest tick in [since, at] (None: no tick since `since`), `following`
    the first tick after `at`. It answers for every moment in [at, following)."""

    since: datetime
    at: datetime
    latest: datetime | None
    following: datetime


def _latest(schedule: Schedule, at: datetime, first: datetime, period: timedelta) -> datetime:
    """The newest tick in [first, at], given that `first` is a tick <= at: look back one
    estimated period, doubling while that finds nothing, then step forward."""
    span = period
    while True:
        start = at - span
        candidate = first if start < first else schedule.next_after(start)
        if candidate <= at:
            while (following := schedule.next_after(candidate)) <= at:
                candidate = following
            return candidate
        span *= 2


def _fresh(schedule: Schedule, at: datetime, since: datetime) -> TickWindow:
    first = schedule.next_after(since - _EPSILON)
    if first > at:
        return TickWindow(since=since, at=at, latest=None, following=first)
    second = schedule.next_after(first)
    if second > at:
        return TickWindow(since=since, at=at, latest=first, following=second)
    latest = _latest(schedule, at, second, second - first)
    return TickWindow(since=since, at=at, latest=latest, following=schedule.next_after(latest))


def advance(
    schedule: Schedule, at: datetime, *, since: datetime, previous: TickWindow | None
) -> TickWindow:
    """The window of `at`, reusing `previous` when it is for the same `since` and not later."""
    if previous is None or previous.since != since or at < previous.at:
        return _fresh(schedule, at, since)
    if at < previous.following:
        return TickWindow(since=since, at=at, latest=previous.latest, following=previous.following)
    latest, following = previous.following, schedule.next_after(previous.following)
    for _ in range(STEP_LIMIT):
        if following > at:
            return TickWindow(since=since, at=at, latest=latest, following=following)
        latest, following = following, schedule.next_after(following)
    return _fresh(schedule, at, since)


def ticks_after(
    schedule: Schedule, after: datetime, upto: datetime, *, limit: int
) -> list[datetime]:
    """Ticks t with after < t <= upto, ascending; the newest `limit` of them when more."""
    found: list[datetime] = []
    tick = schedule.next_after(after)
    while tick <= upto and len(found) < limit:
        found.append(tick)
        tick = schedule.next_after(tick)
    if tick <= upto:  # more than `limit`: the newest ones matter
        return schedule.ticks_between(after, upto, limit=limit, newest=True)
    return found
