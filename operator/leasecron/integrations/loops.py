"""Guard functions that the `schedule` library or a plain timer loop calls on every replica,
so that each tick runs once.

Neither kind of loop knows ticks that replicas share (`schedule.every(1).minutes` counts from
each process's start, a `time.sleep` loop drifts), so the guard is given the schedule:
`every=` (aligned to the Unix epoch) or `cron=` + `time_zone`, or `job=` a ScheduledJob.

    send = guarded(send_reminders, every="1m")
    schedule.every(1).minutes.do(send)            # the `schedule` library, or:
    while True:
        send(); time.sleep(60)                    # a plain loop

Each call claims the latest tick at or before now and runs the body only when this replica
got it; it returns the guard's `GuardResult` (the body's value in `.value`). A loop that calls
twice within one tick runs at most once: the second call finds the tick taken. `ticks(...)`
is a loop that wakes at each tick (interruptible with a `threading.Event`), and `run_every`
runs a guarded body at each of them, each call claiming the tick it woke for even if it
starts late.

The guard is named after the body's `__name__` (`_` becomes `-`) unless `name=` is given.
Does not call the body on ticks the loop slept through: like the loops it serves, a tick
nobody was awake for is not run (a `job=` guard's ScheduledJob alarms it as missed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from leasecron.integrations import _firing
from leasecron.models.configs import to_timedelta
from leasecron.models.schedules import Schedule
from leasecron.runtime import GuardResult

T = TypeVar("T")


def guarded(
    body: Callable[..., T], *, name: str | None = None, **guard_options: Any
) -> Callable[..., GuardResult[T]]:
    """`body` wrapped so that each call runs it on one replica per tick; see the module
    docstring. `guard_options`: those of `leasecron.runtime.Guard`."""
    return _firing.guard_callable(body, name=name, options=guard_options)


def ticks(
    *,
    every: str | float | None = None,
    cron: str | None = None,
    time_zone: str | None = None,
    stop: threading.Event | None = None,
) -> Iterator[datetime]:
    """The ticks of `every` / `cron` from now on, each yielded once it has come (UTC). When
    the caller took longer than a tick, the ticks it missed are passed over and the latest one
    is yielded. Ends when `stop` is set."""
    schedule = _schedule(every=every, cron=cron, time_zone=time_zone)
    waiting = stop or threading.Event()
    upcoming = schedule.next_after(datetime.now(UTC))
    while True:
        now = datetime.now(UTC)
        if now < upcoming:
            if waiting.wait(min((upcoming - now).total_seconds(), 60.0)):
                return
            continue
        latest = schedule.latest_at_or_before(now) or upcoming
        yield latest
        upcoming = schedule.next_after(max(latest, datetime.now(UTC)))


def run_every(
    body: Callable[..., Any],
    *,
    name: str | None = None,
    every: str | float | None = None,
    cron: str | None = None,
    time_zone: str | None = None,
    stop: threading.Event | None = None,
    **guard_options: Any,
) -> None:
    """Call `body()` at each tick of `every` / `cron` on the one replica that claims it,
    until `stop` is set (a body's exception is logged by the caller's loop: here it ends the
    loop, as it would end a plain `while True`)."""
    options = {**guard_options, "every": every, "cron": cron, "time_zone": time_zone}
    call = guarded(body, name=name, **{k: v for k, v in options.items() if v is not None})
    for tick in ticks(every=every, cron=cron, time_zone=time_zone, stop=stop):
        with _firing.firing(_firing.Firing(at=tick)):
            call()


def _schedule(*, every: str | float | None, cron: str | None, time_zone: str | None) -> Schedule:
    if (every is None) == (cron is None):
        raise ValueError(f"give every= or cron= (every={every!r}, cron={cron!r})")
    if cron is not None:
        return Schedule.parse(cron, time_zone=time_zone or "UTC")
    interval = to_timedelta("every", every)
    if interval < timedelta(seconds=1) or interval % timedelta(seconds=1):
        raise ValueError(f"every ({every!r}) must be a whole number of seconds, at least 1s")
    return Schedule.parse(f"@every {int(interval.total_seconds())}s")


__all__ = ["guarded", "run_every", "ticks"]
