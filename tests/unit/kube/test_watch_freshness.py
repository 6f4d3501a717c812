"""The freshness rules of an informer: a watch always ends well inside the quiet bound, and the
supervisor's verdict on silence, a gone thread and a stuck request, on simulated seconds."""

from __future__ import annotations

import random

import pytest

from leasecron.kube._freshness import (
    DEFAULT_MAX_QUIET,
    Verdict,
    check_max_quiet,
    judge,
    supervision_period,
    watch_timeout_seconds,
)
from leasecron.kube.clients import Kube
from leasecron.kube.watches import Informer
from leasecron.models.clocks import FakeClock

BOUND = 90.0


def verdict(
    *,
    quiet: float,
    alive: bool = True,
    streaming: bool = True,
    blocked_for: float | None = None,
) -> Verdict:
    now = 1000.0
    return judge(
        now=now,
        last_heard=now - quiet,
        max_quiet=BOUND,
        alive=alive,
        streaming=streaming,
        blocked_since=None if blocked_for is None else now - blocked_for,
    )


@pytest.mark.parametrize("max_quiet", [2.0, 3.0, 10.0, 90.0, 600.0])
def test_every_watch_ends_well_inside_the_quiet_bound(max_quiet: float) -> None:
    rng = random.Random(7)
    timeouts = {watch_timeout_seconds(max_quiet, rng=rng) for _ in range(500)}
    assert min(timeouts) >= 1
    assert max(timeouts) <= max(1.0, max_quiet * 0.85) < max_quiet


def test_the_default_bound_reopens_an_idle_watch_about_once_a_minute() -> None:
    rng = random.Random(11)
    timeouts = [watch_timeout_seconds(DEFAULT_MAX_QUIET, rng=rng) for _ in range(1000)]
    assert (min(timeouts), max(timeouts)) == (58, 76)
    reopens_per_hour = 3600 / (sum(timeouts) / len(timeouts))
    assert 45 < reopens_per_hour < 65


def test_a_fresh_watch_is_left_alone_up_to_the_bound() -> None:
    assert verdict(quiet=0.0) is Verdict.FRESH
    assert verdict(quiet=BOUND) is Verdict.FRESH
    assert verdict(quiet=BOUND, streaming=False, blocked_for=BOUND * 2) is Verdict.FRESH


def test_an_open_stream_silent_beyond_the_bound_is_presumed_dead() -> None:
    assert verdict(quiet=BOUND + 0.1) is Verdict.QUIET


def test_a_request_blocked_beyond_the_bound_gets_its_thread_replaced() -> None:
    assert verdict(quiet=BOUND * 2, streaming=False, blocked_for=BOUND + 0.1) is Verdict.STUCK


def test_a_thread_retrying_with_backoff_is_stale_but_not_replaced() -> None:
    assert verdict(quiet=BOUND * 3, streaming=False) is Verdict.RETRYING
    assert verdict(quiet=BOUND * 3, streaming=False, blocked_for=1.0) is Verdict.RETRYING


def test_a_gone_thread_is_dead_whatever_else_holds() -> None:
    assert verdict(quiet=0.0, alive=False) is Verdict.DEAD
    assert verdict(quiet=BOUND * 3, alive=False, streaming=False) is Verdict.DEAD


def test_the_supervisor_looks_four_times_per_bound_and_at_least_every_five_seconds() -> None:
    assert supervision_period(2.0) == 0.5
    assert supervision_period(DEFAULT_MAX_QUIET) == 5.0


@pytest.mark.parametrize("bad", [0.0, 1.5, -3.0, float("nan"), float("inf")])
def test_a_bound_below_two_seconds_or_not_finite_is_refused_naming_the_value(bad: float) -> None:
    with pytest.raises(ValueError, match=r"max_quiet \(.*\) must be a number of seconds >= 2"):
        check_max_quiet(bad)


def test_an_informer_is_healthy_only_while_connected_and_heard_within_the_bound() -> None:
    clock = FakeClock()
    informer = Informer(Kube.__new__(Kube), path="/api/v1/configmaps", clock=clock, max_quiet=10)
    assert (informer.healthy, informer.staleness()) == (False, float("inf"))
    informer._connected = True  # what start() sets after its list
    informer.last_heard = clock.monotonic()
    clock.advance(10.0)
    assert (informer.healthy, informer.staleness()) == (True, 10.0)
    clock.advance(0.5)
    assert (informer.healthy, informer.staleness()) == (False, 10.5)
    informer.last_heard = clock.monotonic()
    assert informer.healthy
    informer._connected = False  # the watch failed
    assert not informer.healthy
