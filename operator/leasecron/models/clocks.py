"""Time, injected. Decisions take a Clock so tests run on simulated seconds without sleeping.

`monotonic()` is this process's own monotonic clock: the only clock trusted for expiry.
`now()` is wall time (UTC, aware): used for ticks and for the human-readable Lease timestamps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...


class SystemClock:
    """The real clocks. `skew` shifts wall time only (for tests of replicas whose clock is off)."""

    def __init__(self, *, skew: timedelta = timedelta(0)) -> None:
        self.skew = skew

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skew


class OffsetClock:
    """Wall time of `base` shifted by `offset()` seconds, read at every call (the API
    server's clock as `kube.servertime.ServerTime` estimates it); monotonic time is `base`'s."""

    def __init__(self, base: Clock, offset: Callable[[], float]) -> None:
        self.base = base
        self._offset = offset

    def monotonic(self) -> float:
        return self.base.monotonic()

    def now(self) -> datetime:
        return self.base.now() + timedelta(seconds=self._offset())


class FakeClock:
    """A clock that moves only when told to; for unit tests of pure logic."""

    def __init__(self, *, start: datetime | None = None, monotonic: float = 1000.0) -> None:
        self._wall = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = monotonic

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> datetime:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall += timedelta(seconds=seconds)


SYSTEM_CLOCK = SystemClock()
