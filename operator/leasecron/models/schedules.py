"""Schedules: which instants are ticks of a ScheduledJob.

Owns parsing of the `schedule` field and tick arithmetic. It does not decide what runs for a
tick (catch-up, starting deadlines, jitter); callers do, from the instants computed here.

Forms accepted:

- 5-field cron, `minute hour day-of-month month day-of-week`. When both day fields are
  restricted, a day matching either runs (Vixie cron, Kubernetes CronJob).
- 6-field cron with the seconds first (robfig/Quartz order): `*/5 * * * * *` is every 5 s.
- `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`.
- `@every <duration>` (Go-style, whole seconds, at least 1s), anchored at the Unix epoch so that
  every replica computes the same instants: `@every 30s` ticks at :00 and :30 of each minute.
  It ignores the time zone.

Cron forms are read in the job's time zone. Daylight saving time is handled by one rule set:

- Ticks are distinct instants; no instant is ever a tick twice.
- A schedule whose hour field covers every hour (`*`, `*/1`, `0-23`, `@hourly`) follows real
  time: its ticks are the instants whose local wall time matches. Wall times skipped by a
  spring-forward gap do not occur; wall times repeated by a fall-back fold tick on both passes.
  So `0 * * * *` stays hourly in real time across both changes.
- Any other schedule follows the wall clock: each matching wall time ticks once. A wall time
  repeated by a fold ticks at its first occurrence only. A wall time skipped by a gap ticks at
  the first instant after the gap (`30 2 * * *` in Europe/Berlin runs at 03:00 CEST on the day
  the clocks spring forward); several skipped wall times collapse into that single tick.

This is the rule of Vixie cron, which runs "wildcard" jobs by real time and fixed-time jobs by
the wall clock, with the hour field deciding which kind a schedule is.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import cast
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, CroniterError, croniter

from leasecron.models import _zones
from leasecron.models.durations import DurationError, parse_duration

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REFERENCE = datetime(2000, 1, 1)
_LOOKBACK = timedelta(days=366 * 16)
_ANSWERS = 1024
"""Answers a cron schedule remembers (all forgotten at once when full)."""
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS_5 = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELDS_6 = ("second", *_FIELDS_5)
_RANGES = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 or SUN-SAT",
}
_HASHED_OR_RANDOM = re.compile(r"(?<![A-Z])[HR](?![A-Z])")
_FORMS = "use 5 cron fields, 6 with seconds first, @hourly..@yearly or '@every <duration>'"


class ScheduleError(ValueError):
    """A schedule expression that cannot be used; `reason` completes a sentence about it."""

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"schedule {expression!r} {reason}")
        self.expression = expression
        self.reason = reason


class _Cron:
    """One croniter reused under a lock: building one per lookup costs four times as much."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._iter = croniter(expression, _REFERENCE, ret_type=datetime)
        self._lock = threading.Lock()

    def next_wall(self, after: datetime) -> datetime:
        """The first matching naive wall time strictly after the naive `after`."""
        with self._lock:
            return cast(datetime, self._iter.get_next(datetime, start_time=after))


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule in a time zone. Build it with `Schedule.parse`.

    All methods take aware datetimes and return aware datetimes in UTC.
    """

    expression: str
    time_zone: str
    every: timedelta | None
    """The interval of an `@every` schedule; None for cron forms."""
    follows_real_time: bool
    """True for `@every` and for cron whose hour field covers every hour (see module doc)."""
    _cron: _Cron | None = field(repr=False, compare=False)
    _zone: ZoneInfo = field(repr=False, compare=False)
    _answers: dict[datetime, datetime] = field(default_factory=dict, repr=False, compare=False)
    """The latest answers of `next_after`: the jobs that share a schedule (one `Schedule` per
    expression and time zone) ask for the tick after the same instant, one per job of a shard
    at each claim, and one answer can take croniter and the zone's rules milliseconds."""

    @classmethod
    def parse(cls, expression: str, *, time_zone: str = "UTC") -> Schedule:
        """Parse `expression` for `time_zone`; ScheduleError names what is wrong."""
        try:
            zone = _zones.load_zone(time_zone)
        except ValueError as e:
            raise ScheduleError(expression, f"cannot be read: time zone {time_zone!r} {e}") from e
        text = " ".join(expression.split())
        lowered = text.lower()
        if not text:
            raise ScheduleError(expression, f"is empty; {_FORMS}")
        if lowered.startswith(("tz=", "cron_tz=")):
            raise ScheduleError(expression, "sets a time zone; use the timeZone field instead")
        if lowered == "@every" or lowered.startswith("@every "):
            every = _parse_every(expression, text[len("@every") :].strip())
            return cls(expression, time_zone, every, True, None, zone)
        if text.startswith("@"):
            if lowered not in _MACROS:
                raise ScheduleError(expression, f"is not a known macro; {_FORMS}")
            text = _MACROS[lowered]
        cron, every_hour = _compile(expression, text)
        return cls(expression, time_zone, None, every_hour, cron, zone)

    def __str__(self) -> str:
        return self.expression

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment`."""
        instant = _utc(moment)
        if self.every is not None:
            return _next_every(self.every, instant)
        found = self._answers.get(instant)
        if found is not None:
            return found
        assert self._cron is not None
        if self.follows_real_time:
            found = self._next_real_time(self._cron, instant)
        else:
            found = self._next_wall_clock(self._cron, instant)
        if len(self._answers) >= _ANSWERS:
            self._answers.clear()
        self._answers[instant] = found
        return found

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last tick at or before `moment`; None if there was none in the 16 years before."""
        instant = _utc(moment)
        span = _zones.SECOND
        while span <= _LOOKBACK:
            tick = self.next_after(instant - span)
            if tick <= instant:
                while (following := self.next_after(tick)) <= instant:
                    tick = following
                return tick
            span *= 2
        return None

    def ticks_between(
        self, after: datetime, upto: datetime, *, limit: int, newest: bool = False
    ) -> list[datetime]:
        """Ticks t with after < t <= upto, ascending, at most `limit` of them: the earliest
        ones, or with `newest=True` the latest ones (still in ascending order)."""
        start, end = _utc(after), _utc(upto)
        found: list[datetime] = []
        if newest:
            tick = self.latest_at_or_before(end)
            while tick is not None and tick > start and len(found) < limit:
                found.append(tick)
                tick = self.latest_at_or_before(tick - timedelta(microseconds=1))
            return found[::-1]
        tick = self.next_after(start)
        while tick <= end and len(found) < limit:
            found.append(tick)
            tick = self.next_after(tick)
        return found

    def _next_wall_clock(self, cron: _Cron, instant: datetime) -> datetime:
        # Wall times up to the threshold all name instants at or before `instant`; the mapping
        # from wall time to first instant never goes backwards, so the next match is the answer.
        if _zones.on_second_pass(self._zone, instant):
            threshold = _zones.fold_end(self._zone, instant) - _zones.SECOND
        else:
            threshold = _zones.wall_time(self._zone, instant)
        wall = cron.next_wall(_zones.floor_second(threshold))
        return _zones.first_instant(self._zone, wall)

    def _next_real_time(self, cron: _Cron, instant: datetime) -> datetime:
        # Within one stretch of constant offset, wall time is instant + offset; walk stretch by
        # stretch until the candidate lies inside the stretch it was computed for.
        start, search_from = instant, instant
        offset = _zones.offset_at(self._zone, instant)
        while True:
            wall = cron.next_wall(_zones.floor_second((search_from + offset).replace(tzinfo=None)))
            candidate = (wall - offset).replace(tzinfo=UTC)
            change = _zones.first_change(self._zone, after=start, upto=candidate, offset=offset)
            if change is None:
                return candidate
            start, search_from = change, change - _zones.SECOND
            offset = _zones.offset_at(self._zone, change)


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} is a naive datetime; schedules need aware datetimes")
    return moment.astimezone(UTC)


def _next_every(every: timedelta, instant: datetime) -> datetime:
    step = every // timedelta(microseconds=1)
    elapsed = (instant - _EPOCH) // timedelta(microseconds=1)
    return _EPOCH + timedelta(microseconds=(elapsed // step + 1) * step)


def _parse_every(expression: str, text: str) -> timedelta:
    if not text:
        raise ScheduleError(expression, "needs an interval, for example '@every 30s'")
    try:
        every = parse_duration(text)
    except DurationError as e:
        raise ScheduleError(expression, f"has an invalid interval: {e}") from e
    if every < _zones.SECOND or every % _zones.SECOND:
        raise ScheduleError(expression, "must use a whole number of seconds, at least 1s")
    return every


def _compile(expression: str, text: str) -> tuple[_Cron, bool]:
    """The croniter for `text` and whether its hour field covers every hour."""
    fields = text.split()
    if len(fields) not in (5, 6):
        raise ScheduleError(expression, f"has {len(fields)} fields; {_FORMS}")
    names = _FIELDS_6 if len(fields) == 6 else _FIELDS_5
    for name, value in zip(names, fields, strict=True):
        if _HASHED_OR_RANDOM.search(value.upper()):
            raise ScheduleError(
                expression,
                f"uses H or R in the {name} field; hashed and random values are not supported",
            )
    # croniter reads a sixth field as seconds last; leasecron's 6-field form has seconds first.
    ordered = [*fields[1:], fields[0]] if len(fields) == 6 else fields
    try:
        cron = _Cron(" ".join(ordered))
        cron.next_wall(_REFERENCE)
        expanded = croniter.expand(cron.expression)[0]
    except CroniterBadDateError as e:
        raise ScheduleError(expression, "never matches a date (check the day-of-month)") from e
    except (CroniterError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ScheduleError(expression, _which_field(names, fields)) from e
    hours = expanded[1]
    return cron, hours == ["*"] or set(hours) == set(range(24))


def _which_field(names: tuple[str, ...], fields: list[str]) -> str:
    """Names the first field croniter refuses on its own, for a message a person can act on."""
    for index, (name, value) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = value
        ordered = [*probe[1:], probe[0]] if len(probe) == 6 else probe
        try:
            croniter(" ".join(ordered), _REFERENCE, ret_type=datetime).get_next()
        except (CroniterError, ValueError, KeyError, IndexError, TypeError):
            return (
                f"has an invalid {name} field {value!r} "
                f"(allowed: {_RANGES[name]}, with *, lists a,b, ranges a-b and steps /n)"
            )
    return "is not a valid cron expression"
