"""Pure pieces of an informer's freshness: how long one watch asks the server to run, and what
the informer's supervisor makes of the time since it last heard from the server.

The bound works because a healthy server always speaks within it: a watch asks for
`timeoutSeconds` well below `max_quiet`, so even on a resource type that nobody writes (where
kube-apiserver sends no BOOKMARK, see docs/watches.md) the server ends the watch cleanly, and
the informer re-opens it, before `max_quiet` passes. Silence beyond `max_quiet` therefore means
the path to the server is dead or stuck, not that nothing happened.

No I/O and no clocks: times are passed in, so the rules are unit-tested with plain numbers.
What it does not promise: that a verdict of FRESH means the cache holds every change made on
the server up to now; only that the server was heard within `max_quiet`.
"""

from __future__ import annotations

import math
import random
from enum import StrEnum

DEFAULT_MAX_QUIET = 90.0
"""Seconds without a byte from the server after which an informer's cache counts as stale."""
MIN_MAX_QUIET = 2.0
"""The smallest bound: a watch runs at least 1 s (timeoutSeconds is whole seconds)."""
_TIMEOUT_SHARE = (0.65, 0.85)
"""A watch's timeoutSeconds, as a share of max_quiet: the rest is room to re-open it."""


class Verdict(StrEnum):
    """What the supervisor makes of one look at the watch thread."""

    FRESH = "fresh"
    """Heard from the server within max_quiet; nothing to do."""
    QUIET = "quiet"
    """A stream is open but silent beyond max_quiet: presume the connection dead, close it."""
    STUCK = "stuck"
    """No stream, and one request (list or open) has blocked beyond max_quiet: replace the
    thread (the old one is abandoned and exits when its request returns)."""
    RETRYING = "retrying"
    """Stale, but the thread is cycling through failed attempts with backoff: leave it."""
    DEAD = "dead"
    """The thread is gone: log it and start a new one."""


def check_max_quiet(max_quiet: float) -> float:
    """`max_quiet` as a float; ValueError naming the value when it is below the minimum."""
    if not math.isfinite(max_quiet) or max_quiet < MIN_MAX_QUIET:
        raise ValueError(
            f"max_quiet ({max_quiet!r}) must be a number of seconds >= {MIN_MAX_QUIET:g}: "
            "a watch asks the server for at least 1 s and needs room to re-open"
        )
    return float(max_quiet)


def watch_timeout_seconds(max_quiet: float, *, rng: random.Random | None = None) -> int:
    """timeoutSeconds for one watch: 65-85 % of max_quiet (whole seconds, at least 1), random
    so that many informers do not re-open in step."""
    low, high = (max(1, math.floor(max_quiet * share)) for share in _TIMEOUT_SHARE)
    return (rng or random).randint(low, high)


def judge(
    *,
    now: float,
    last_heard: float,
    max_quiet: float,
    alive: bool,
    streaming: bool,
    blocked_since: float | None,
) -> Verdict:
    """The supervisor's verdict on one watch thread. `last_heard` is when the server last
    spoke (a line, a stream opened or ended by the server, a list); `blocked_since` is when the
    thread's current list or open request began (None when it is in none)."""
    if not alive:
        return Verdict.DEAD
    if now - last_heard <= max_quiet:
        return Verdict.FRESH
    if streaming:
        return Verdict.QUIET
    if blocked_since is not None and now - blocked_since > max_quiet:
        return Verdict.STUCK
    return Verdict.RETRYING


def supervision_period(max_quiet: float) -> float:
    """How often the supervisor looks: a quarter of max_quiet, at most every 5 s."""
    return min(max_quiet / 4, 5.0)
