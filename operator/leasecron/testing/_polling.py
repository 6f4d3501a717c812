"""Waiting on a condition that nothing announces: another process's HTTP endpoint, an object in
the API server read without a watch, a file another process writes.

Owns `poll` (call a check until it returns something truthy). Does not promise how often the
check runs beyond "every `interval` seconds at the most", nor that it runs after the deadline.
Where there is something to wait on (a watch, a condition variable, a process's exit), wait on
that instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.05) -> T:
    """The first truthy `check()` within `timeout` seconds; AssertionError naming `what` and
    the last value seen when there is none."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"not {what} within {timeout}s (last: {last!r})")
