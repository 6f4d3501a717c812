"""What the scheduler integrations share: the fire time of the call in progress, guard names
from job ids, and one guard per name.

A scheduler that knows when a call was *scheduled* (APScheduler's run time, the moment a
Celery message was sent) passes that instant as the guard's tick, so a late or misfired call
claims the tick it was meant for, not the one that happens to be current when it runs. Fire
times of schedulers that count intervals from their own start (APScheduler's interval
trigger, Celery's `schedule`, the `schedule` library) differ from replica to replica, so the
guard is asked to snap it (`claim(snap=True)`) to the latest tick at or before it of its
`every=`/`cron=` or, for `job=`, of the ScheduledJob's schedule, which every replica computes
alike.

Owns `Firing` / `firing` / `fire_time` (the call in progress, a context variable),
`guard_name`, `guard_named` (one Guard per name and options in a process) and
`guard_callable` (a body wrapped so that each call claims its tick first). Does not claim or
snap anything itself: the guard (`leasecron.runtime.Guard`) does.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from leasecron.runtime import Guard, GuardResult

_NAME_PART = re.compile(r"[^a-z0-9.-]+")
_GENERATED_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Firing:
    """A call a scheduler made: when it was scheduled, the scheduler's id for the job, what
    the scheduler says about its timing (its grace for a late start, and the interval of a
    trigger that counts from each replica's own start), and guard options the integration
    was given for all of its jobs (a job's own options override them)."""

    at: datetime
    job_id: str | None = None
    starting_deadline: timedelta | None = None
    interval: timedelta | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


_FIRING: ContextVar[Firing | None] = ContextVar("leasecron_firing", default=None)


@contextmanager
def firing(announced: Firing) -> Iterator[Firing]:
    """Within the block, `fire_time()` is `announced` (its `at` made aware)."""
    token = _FIRING.set(replace(announced, at=aware(announced.at)))
    try:
        yield announced
    finally:
        _FIRING.reset(token)


def fire_time() -> Firing | None:
    """The call in progress as a scheduler announced it; None outside such a call."""
    return _FIRING.get()


def aware(moment: datetime) -> datetime:
    """`moment` in UTC; a naive value is taken as this machine's local time."""
    return moment.astimezone(UTC)


def guard_name(job_id: str) -> str:
    """A guard name (a Lease name part) for a scheduler's job id: lower case, `_` and other
    characters outside `[a-z0-9.-]` become `-`. A 32-hex-digit id (APScheduler's generated
    one, different on every replica) is refused: the guard would not be shared."""
    if _GENERATED_ID.fullmatch(job_id):
        raise ValueError(
            f"job id {job_id!r} looks generated (it differs on every replica, so replicas would "
            "not share a guard): give the job an id=, the same on every replica"
        )
    name = _NAME_PART.sub("-", job_id.lower()).strip("-.")
    if not name:
        raise ValueError(f"job id {job_id!r} has no letters or digits to name a guard after")
    return name


_GUARDS: dict[tuple[str, tuple[tuple[str, str], ...]], Guard] = {}
_GUARDS_LOCK = threading.Lock()


def guard_named(name: str, options: Mapping[str, Any]) -> Guard:
    """The process's one Guard for `name` with these options (made on first use)."""
    key = (name, tuple(sorted((k, repr(v)) for k, v in options.items())))
    with _GUARDS_LOCK:
        guard = _GUARDS.get(key)
        if guard is None:
            guard = _GUARDS[key] = Guard(name, **options)
        return guard


def is_async(func: Callable[..., Any]) -> bool:
    """Whether calling `func` (a function, or a partial of one) returns a coroutine."""
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func)


FindFiring = Callable[[], Firing | None]
"""Where an integration finds the call in progress (None: not called by its scheduler)."""


def with_firing_defaults(options: Mapping[str, Any], found: Firing | None) -> dict[str, Any]:
    """The guard options for a call: `options` over the integration's own, and where they say
    nothing, the scheduler's grace as the starting deadline and its trigger's interval as
    `every` (not with `job=`: the ScheduledJob sets both)."""
    if found is None:
        return dict(options)
    merged = {**found.options, **options}
    if "job" in merged:
        return merged
    if found.starting_deadline is not None:
        merged.setdefault("starting_deadline", found.starting_deadline)
    interval = found.interval
    if interval is not None and not {"every", "cron"} & merged.keys():
        seconds = interval.total_seconds()
        if seconds >= 1 and seconds == int(seconds):
            merged["every"] = interval
    return merged


def tick_of(found: Firing | None) -> datetime | None:
    """The fire time a call claims (the guard snaps it onto its schedule); None when no
    scheduler announced the call (the guard's own rule then: the latest tick at or before
    now)."""
    return aware(found.at) if found is not None else None


def guard_callable(
    body: Callable[..., Any],
    *,
    name: str | None,
    options: Mapping[str, Any],
    find: FindFiring = fire_time,
) -> Callable[..., Any]:
    """`body` wrapped so that each call claims its tick first and runs only when this replica
    got it; the call returns the guard's `GuardResult` (async for a coroutine function).

    The guard is named `name`, else after the job id of the firing, else after `body`."""

    def prepare() -> tuple[Guard, datetime | None]:
        found = find()
        merged = with_firing_defaults(options, found)
        job_id = found.job_id if found is not None and found.job_id else body.__name__
        guard = guard_named(name or guard_name(job_id), merged)
        return guard, tick_of(found)

    if is_async(body):

        @functools.wraps(body)
        async def run_async(*args: Any, **kwargs: Any) -> GuardResult[Any]:
            guard, tick = prepare()
            async with guard.claim(tick=tick, snap=True) as claimed:
                if not claimed:
                    return GuardResult.of(claimed)
                value = await body(*args, **kwargs)
            return GuardResult.of(claimed, value)

        return run_async

    @functools.wraps(body)
    def run(*args: Any, **kwargs: Any) -> GuardResult[Any]:
        guard, tick = prepare()
        with guard.claim(tick=tick, snap=True) as claimed:
            if not claimed:
                return GuardResult.of(claimed)
            value = body(*args, **kwargs)
        return GuardResult.of(claimed, value)

    return run
