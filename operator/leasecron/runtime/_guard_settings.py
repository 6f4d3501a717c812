"""What a guard is built with, checked when it is built, and the tick rule.

Owns `GuardSettings` (the validated parameters of one `Guard`: its name and Lease, where its
ticks come from, its lock settings, its starting deadline and stagger), `GuardConfigError`
(a message that names the parameter and shows the value) and `tick_for` (which tick a call
claims). Pure: no I/O. Schedules are parsed by `models.schedules`, durations by
`models.configs` / `models.durations`, lock settings are a `models.configs.LockConfig`.

The tick rule: the caller's fire time when it is known (an explicit `tick` given to the call,
else the guard's `tick` callable when it returns one), else the latest tick of the guard's
schedule at or before now (`every`: aligned to the Unix epoch; `cron`: read in `time_zone`;
`job=`: the ScheduledJob's schedule and time zone). Ticks are whole seconds (the Lease records
the claimed tick, and JobRuns are named after it, at one-second resolution), so a fire time
is truncated to its second.

Snapping (`snap=True`, on the guard or one claim): a fire time is moved to the latest tick of
that same schedule at or before it, so that callers whose triggers count intervals from their
own start (APScheduler's interval trigger, Celery's `schedule`, a timer loop), and so fire at
different moments on each replica, claim the same tick. For a `job=` guard the schedule is
the ScheduledJob's, read at claim time. A guard without a schedule takes the fire time as it
is.

Lateness (`start_by`): a plain guard's call may start its body until its own fire time +
`starting_deadline` (the time the caller's scheduler meant to call it, not the snapped tick:
a trigger at another phase than the grid is not late by its phase); a `job=` guard's until
the tick + the ScheduledJob's startingDeadline, as a Scheduler's run.

The Lease (`lease_config`): a guard claims on a short Lease (`lease_duration`, the engine's
shard Lease duration by default) renewed while the body runs, so a holder that dies blocks
the guard that long, not its `at_most_for`; `at_most_for` bounds the run itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from leasecron.coordination.shards import DEFAULT_SHARD_LEASE_S
from leasecron.models.configs import ConfigError, DurationLike, LockConfig, to_timedelta
from leasecron.models.durations import format_duration
from leasecron.models.identity import make_identity
from leasecron.models.names import dns_name, format_tick
from leasecron.models.schedules import Schedule, ScheduleError

LEASE_PREFIX = "leasecron-guard-"
DEFAULT_AT_MOST_FOR = timedelta(minutes=15)
DEFAULT_STARTING_DEADLINE = timedelta(seconds=60)
DEFAULT_STAGGER = timedelta(milliseconds=200)
DEFAULT_LEASE_DURATION = timedelta(seconds=DEFAULT_SHARD_LEASE_S)
"""A guard Lease's leaseDurationSeconds: how long a holder that dies mid-body blocks it."""
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NAME_LIMIT = 253 - len(LEASE_PREFIX)
_LOCK_FIELDS = {"atMostFor": "at_most_for", "atLeastFor": "at_least_for"}

TickSource = Callable[[], datetime | None]
"""Returns the caller's scheduled fire time of the current call (None: not known)."""


_process: list[str] = []


def process_identity() -> str:
    """The identity of this process's guards that were given none (made on first use)."""
    if not _process:
        _process.append(make_identity())
    return _process[0]


def _forget_process_identity() -> None:
    _process.clear()


os.register_at_fork(after_in_child=_forget_process_identity)


class GuardConfigError(ValueError):
    """A guard that cannot work as given: the message names the parameter (or the
    ScheduledJob field) and shows the offending value."""


def check_name(name: object) -> str:
    """`name` if it can name the guard's Lease (`leasecron-guard-<name>`)."""
    if not isinstance(name, str) or len(name) > _NAME_LIMIT or not _NAME.fullmatch(name):
        raise GuardConfigError(
            f"name {name!r} must be a DNS name: lower-case letters, digits, '-' and '.', "
            f"starting and ending with a letter or digit, at most {_NAME_LIMIT} characters"
        )
    return name


def lease_name(name: str) -> str:
    """The Lease a guard claims its ticks on."""
    return dns_name(f"{LEASE_PREFIX}{name}")


def _duration(field: str, value: DurationLike) -> timedelta:
    try:
        return to_timedelta(field, value)
    except ConfigError as e:
        raise GuardConfigError(str(e)) from e


def _show(value: timedelta) -> str:
    return format_duration(value)


def parse_schedule(
    *, every: DurationLike | None, cron: str | None, time_zone: str | None
) -> Schedule | None:
    """The guard's own schedule from `every` or `cron` (+ `time_zone`); None when it has
    none."""
    if every is not None and cron is not None:
        raise GuardConfigError(f"every ({every!r}) and cron ({cron!r}): give one of them, not both")
    if time_zone is not None and cron is None:
        raise GuardConfigError(
            f"time_zone ({time_zone!r}) applies to cron= only (every= is aligned to the Unix "
            "epoch; a job= guard uses the ScheduledJob's spec.timeZone)"
        )
    if every is not None:
        interval = _duration("every", every)
        if interval < timedelta(seconds=1) or interval % timedelta(seconds=1):
            raise GuardConfigError(
                f"every ({_show(interval)}) must be a whole number of seconds, at least 1s"
            )
        return Schedule.parse(f"@every {int(interval.total_seconds())}s")
    if cron is None:
        return None
    if not isinstance(cron, str):
        raise GuardConfigError(f"cron ({cron!r}) must be a string such as '0 2 * * *'")
    try:
        return Schedule.parse(cron, time_zone=time_zone or "UTC")
    except ScheduleError as e:
        field = "time_zone" if "time zone" in e.reason else "cron"
        raise GuardConfigError(f"{field}: {e}") from e


def lock_config(
    *, at_most_for: DurationLike, at_least_for: DurationLike, keep_alive: bool
) -> LockConfig:
    """A LockConfig, its errors naming the guard's parameters."""
    at_most = _duration("at_most_for", at_most_for)
    at_least = _duration("at_least_for", at_least_for)
    try:
        return LockConfig(at_most_for=at_most, at_least_for=at_least, keep_alive=keep_alive)
    except ConfigError as e:
        message = str(e)
        for spec_name, param in _LOCK_FIELDS.items():
            message = message.replace(spec_name, param)
        raise GuardConfigError(message) from e


@dataclass(frozen=True, kw_only=True)
class GuardSettings:
    """The validated parameters of one guard. With `job`, `lock` and `starting_deadline`
    are None: they come from the ScheduledJob at each claim."""

    name: str
    namespace: str
    given_identity: str | None
    """The identity given to the guard; None: the process's (see `identity`)."""
    schedule: Schedule | None
    tick_source: TickSource | None
    job: str | None
    lock: LockConfig | None
    starting_deadline: timedelta | None
    stagger: timedelta
    snap: bool = False
    """Whether a given fire time is snapped onto the schedule by default (see the module
    docstring)."""
    lease_duration: timedelta = DEFAULT_LEASE_DURATION
    """The guard Lease's leaseDurationSeconds, renewed every third of it while a body runs."""

    @property
    def lease(self) -> str:
        return lease_name(self.name)

    @property
    def identity(self) -> str:
        """The holder this guard writes: the given identity, else the process's own (one
        per process incarnation, made again in a forked child)."""
        return self.given_identity or process_identity()

    @classmethod
    def build(
        cls,
        name: object,
        *,
        namespace: str,
        identity: str | None,
        every: DurationLike | None,
        cron: str | None,
        time_zone: str | None,
        tick: TickSource | None,
        job: str | None,
        at_most_for: DurationLike | None,
        at_least_for: DurationLike | None,
        keep_alive: bool | None,
        starting_deadline: DurationLike | None,
        stagger: DurationLike,
        snap: bool = False,
        lease_duration: DurationLike | None = None,
    ) -> GuardSettings:
        """Check every parameter; GuardConfigError names the first bad one."""
        checked = check_name(name)
        lease = _lease_duration(lease_duration)
        _check_snap(snap)
        _check_tick(tick)
        spread = _stagger(stagger)
        if job is not None:
            return cls._for_job(
                checked,
                namespace=namespace,
                given_identity=identity,
                job=job,
                tick=tick,
                stagger=spread,
                snap=snap,
                lease=lease,
                given={
                    "every": every,
                    "cron": cron,
                    "time_zone": time_zone,
                    "at_most_for": at_most_for,
                    "at_least_for": at_least_for,
                    "keep_alive": keep_alive,
                    "starting_deadline": starting_deadline,
                },
            )
        deadline = _starting_deadline(starting_deadline, stagger=spread)
        return cls(
            name=checked,
            namespace=namespace,
            given_identity=identity,
            schedule=parse_schedule(every=every, cron=cron, time_zone=time_zone),
            tick_source=tick,
            job=None,
            lock=_own_lock(at_most_for, at_least_for, keep_alive),
            starting_deadline=deadline,
            stagger=spread,
            snap=snap,
            lease_duration=lease,
        )

    @classmethod
    def _for_job(
        cls,
        name: str,
        *,
        namespace: str,
        given_identity: str | None,
        job: str,
        tick: TickSource | None,
        stagger: timedelta,
        snap: bool,
        lease: timedelta,
        given: dict[str, object],
    ) -> GuardSettings:
        if not isinstance(job, str) or not job:
            raise GuardConfigError(f"job ({job!r}) must be the name of a ScheduledJob")
        for param, value in given.items():
            if value is not None:
                raise GuardConfigError(
                    f"{param} ({value!r}) cannot be combined with job={job!r}: the "
                    "ScheduledJob's spec sets the schedule, time zone, lock and startingDeadline"
                )
        return cls(
            name=name,
            namespace=namespace,
            given_identity=given_identity,
            schedule=None,
            tick_source=tick,
            job=job,
            lock=None,
            starting_deadline=None,
            stagger=stagger,
            snap=snap,
            lease_duration=lease,
        )


def _check_snap(snap: object) -> None:
    if not isinstance(snap, bool):
        raise GuardConfigError(f"snap ({snap!r}) must be True or False")


def _check_tick(tick: object) -> None:
    if tick is not None and not callable(tick):
        raise GuardConfigError(f"tick ({tick!r}) must be a callable returning a datetime")


def _stagger(value: DurationLike) -> timedelta:
    spread = _duration("stagger", value)
    if spread < timedelta(0):
        raise GuardConfigError(f"stagger ({_show(spread)}) must not be negative")
    return spread


def _own_lock(
    at_most_for: DurationLike | None, at_least_for: DurationLike | None, keep_alive: bool | None
) -> LockConfig:
    """The lock of a guard without `job=`: what was given, else the defaults (atMostFor
    DEFAULT_AT_MOST_FOR, no atLeastFor, keepAlive on)."""
    return lock_config(
        at_most_for=DEFAULT_AT_MOST_FOR if at_most_for is None else at_most_for,
        at_least_for=0 if at_least_for is None else at_least_for,
        keep_alive=True if keep_alive is None else keep_alive,
    )


def _starting_deadline(value: DurationLike | None, *, stagger: timedelta) -> timedelta:
    deadline = _duration("starting_deadline", DEFAULT_STARTING_DEADLINE if value is None else value)
    if deadline <= timedelta(0):
        raise GuardConfigError(f"starting_deadline ({_show(deadline)}) must be positive")
    if stagger >= deadline:
        raise GuardConfigError(
            f"stagger ({_show(stagger)}) must be less than starting_deadline ({_show(deadline)})"
        )
    return deadline


def _lease_duration(value: DurationLike | None) -> timedelta:
    lease = DEFAULT_LEASE_DURATION if value is None else _duration("lease_duration", value)
    if lease < timedelta(seconds=1) or lease % timedelta(seconds=1):
        raise GuardConfigError(
            f"lease_duration ({_show(lease)}) must be a whole number of seconds, at least 1s"
        )
    return lease


def lease_config(run: LockConfig, lease: timedelta) -> LockConfig:
    """The LockConfig of the guard's Lease for runs under `run`: the short `lease`, renewed
    while a body runs, and the run's atLeastFor (a Lease lasting at least that long). The
    run's own atMostFor and keepAlive bound the run, not the Lease (the engine's fence)."""
    return LockConfig(
        at_most_for=max(lease, run.at_least_for), at_least_for=run.at_least_for, keep_alive=True
    )


def start_by(*, tick: datetime, fired: datetime | None, deadline: timedelta, job: bool) -> datetime:
    """The latest moment a body of `tick` may start (see the module docstring): a plain
    guard's call is late from its caller's fire time `fired` (when known), a `job=` guard's
    from the tick, by `deadline`."""
    if job or fired is None:
        return tick + deadline
    return max(tick, fired.astimezone(UTC)) + deadline


def whole_second(moment: datetime, *, what: str) -> datetime:
    """`moment` in UTC, truncated to its second; GuardConfigError for a naive datetime."""
    if not isinstance(moment, datetime):
        raise GuardConfigError(f"{what} ({moment!r}) must be a datetime")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise GuardConfigError(f"{what} ({moment!r}) is naive: pass an aware datetime")
    return moment.astimezone(UTC).replace(microsecond=0)


def fire_time(given: datetime | None, source: TickSource | None) -> datetime | None:
    """The caller's fire time of a call: `given`, else what the guard's `tick` callable
    returns (called in the caller's thread), else None."""
    if given is not None:
        return given
    return source() if source is not None else None


def tick_for(
    *,
    name: str,
    now: datetime,
    given: datetime | None,
    schedule: Schedule | None,
    snap: bool = False,
) -> datetime:
    """The tick of a call made at `now` whose fire time is `given` (None: not known), with
    `snap` moved to the latest tick of `schedule` at or before it: see the module docstring.
    GuardConfigError when neither the caller nor a schedule says which tick it is."""
    if given is not None:
        moment = whole_second(given, what="tick")
        if not snap or schedule is None:
            return moment
        snapped = schedule.latest_at_or_before(given.astimezone(UTC))
        if snapped is None:
            raise GuardConfigError(
                f"tick ({format_tick(moment)}): schedule {schedule.expression!r} has no tick "
                "at or before it to snap to"
            )
        return snapped
    if schedule is not None:
        latest = schedule.latest_at_or_before(now)
        if latest is not None:
            return latest
    raise GuardConfigError(
        f"guard {name!r} does not know which tick this call is: give the guard every=, cron=, "
        "job= or a tick= callable, or pass claim(tick=...)"
    )
