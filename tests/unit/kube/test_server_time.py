"""`ServerTime`: the API server's clock from its responses' Date headers, to the second,
narrowed by intersecting the responses' intervals."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from leasecron.kube.servertime import WINDOW_S, ServerTime


class Wall:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0
        self.mono = 100.0


def date_of(server: float) -> str:
    """The Date header a server whose clock reads `server` sends (whole seconds)."""
    return format_datetime(datetime.fromtimestamp(int(server), UTC), usegmt=True)


def respond(clock: ServerTime, wall: Wall, *, offset: float, rtt: float = 0.02) -> None:
    sent = wall.t
    clock.observe(sent=sent, received=sent + rtt, date=date_of(sent + rtt / 2 + offset))


def test_the_offset_is_zero_before_any_response() -> None:
    assert ServerTime().offset() == 0.0
    assert ServerTime().bounds is None


@pytest.mark.parametrize("offset", [-3.0, -0.4, 0.0, 2.7, 3.0])
def test_responses_at_different_phases_narrow_the_offset_to_about_a_round_trip(
    offset: float,
) -> None:
    wall = Wall()
    clock = ServerTime(monotonic=lambda: wall.mono)
    for _ in range(40):
        respond(clock, wall, offset=offset)
        wall.t += 0.37
        wall.mono += 0.37
    assert clock.bounds is not None
    low, high = clock.bounds
    assert low <= offset <= high
    assert high - low < 0.1
    assert abs(clock.offset() - offset) < 0.05


def test_a_clock_the_responses_cannot_prove_off_is_not_corrected() -> None:
    wall = Wall()
    clock = ServerTime(monotonic=lambda: wall.mono)
    for _ in range(3):
        respond(clock, wall, offset=0.0, rtt=0.4)  # in step: every interval holds 0
        wall.t += 0.5
        wall.mono += 0.5
    low, high = clock.bounds or (1.0, 1.0)
    assert low <= 0 <= high
    assert clock.offset() == 0.0


def test_a_clock_proven_off_is_corrected_by_the_least_the_responses_allow() -> None:
    wall = Wall()
    clock = ServerTime(monotonic=lambda: wall.mono)
    respond(clock, wall, offset=3.0)
    low, _ = clock.bounds or (0.0, 0.0)
    assert 0 < low <= 3.0
    assert clock.offset() == low


def test_one_response_bounds_the_offset_within_a_second() -> None:
    wall = Wall()
    clock = ServerTime(monotonic=lambda: wall.mono)
    respond(clock, wall, offset=3.0)
    low, high = clock.bounds or (0.0, 0.0)
    assert low <= 3.0 <= high
    assert high - low <= 1.0 + 0.02


def test_a_stepped_clock_starts_the_estimate_again() -> None:
    wall = Wall()
    clock = ServerTime(monotonic=lambda: wall.mono)
    for _ in range(20):
        respond(clock, wall, offset=0.0)
        wall.t += 0.3
        wall.mono += 0.3
    wall.t -= 5.0  # the host's clock steps back 5 s: the server now reads 5 s ahead
    for _ in range(20):
        respond(clock, wall, offset=5.0)
        wall.t += 0.3
        wall.mono += 0.3
    assert abs(clock.offset() - 5.0) < 0.2


def test_old_responses_stop_counting_after_the_window() -> None:
    wall = Wall()
    clock = ServerTime(monotonic=lambda: wall.mono)
    respond(clock, wall, offset=0.0)
    wall.mono += WINDOW_S + 1
    wall.t += WINDOW_S + 1
    respond(clock, wall, offset=0.6, rtt=0.5)
    low, high = clock.bounds or (0.0, 0.0)
    assert low <= 0.6 <= high


@pytest.mark.parametrize("date", [None, "", "yesterday", "Mon, 99 Foo 2026 99:99:99 GMT"])
def test_a_missing_or_unreadable_date_header_is_ignored(date: str | None) -> None:
    clock = ServerTime()
    clock.observe(sent=1.0, received=1.1, date=date)
    assert clock.offset() == 0.0 and clock.bounds is None
