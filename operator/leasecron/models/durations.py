"""Go-style duration strings (`90s`, `15m`, `1h30m`, `1.5s`, `250ms`) to and from timedelta.

Owns parsing and formatting only. Whether a duration is sensible for a given field (positive,
below some bound) is decided by the spec that uses it, which names the field in its error.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_WHOLE = re.compile(r"(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+")


class DurationError(ValueError):
    """A string that is not a Go-style duration."""


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration; `0` alone is accepted. Negative durations are refused."""
    raw = text.strip()
    if raw == "0":
        return timedelta(0)
    if not raw or not _WHOLE.fullmatch(raw):
        raise DurationError(
            f"{text!r} is not a duration: use a number with a unit (ns, us, ms, s, m, h), "
            "for example 90s, 15m or 1h30m"
        )
    seconds = sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(raw))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """Format as the shortest Go-style string: 90s -> `1m30s`, 0.25s -> `250ms`."""
    total = value.total_seconds()
    if total == 0:
        return "0s"
    sign = "-" if total < 0 else ""
    total = abs(total)
    if total < 1:
        ms = total * 1000
        return f"{sign}{ms:g}ms"
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{int(hours)}h"
    if minutes:
        out += f"{int(minutes)}m"
    if seconds or not out:
        out += f"{round(seconds, 6):g}s"
    return sign + out
