"""Lock and election configuration: immutable values that validate themselves when built.

Owns `LockConfig` (once-per-tick claims, ShedLock's lockAtMostFor / lockAtLeastFor) and
`ElectionConfig` (single-owner jobs and group leaders, client-go's LeaseDuration /
RenewDeadline / RetryPeriod), and `ConfigError`, whose message names the field the way the
ScheduledJob spec spells it and shows the offending value.

Durations are accepted as `timedelta`, seconds (int/float) or Go-style strings (`15m`), and
stored as `timedelta`. It does not decide anything about Leases; `decisions` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from leasecron.models.durations import DurationError, format_duration, parse_duration
from leasecron.models.leases import whole_seconds

JITTER_FACTOR = 1.2
"""client-go's leader election requires renewDeadline > JitterFactor * retryPeriod."""

MIXED_FLEET_MARGIN = timedelta(seconds=1)
"""leaseDuration must exceed renewDeadline by at least this much. A client-go elector on the
same Lease judges changes at 1-second resolution (leaseDurationSeconds is a whole number and
it compares the records it observed), so a smaller margin lets it take over while a leader of
ours still believes, within its renewDeadline, that it leads."""

DurationLike = timedelta | float | int | str


class ConfigError(ValueError):
    """A lock or election setting that cannot work; the message names the field and value."""


def to_timedelta(field: str, value: object) -> timedelta:
    """Normalise a DurationLike, naming `field` in the error."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ConfigError(f"{field} ({value!r}) must be a duration")
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DurationError as exc:
            raise ConfigError(f"{field}: {exc}") from exc
    raise ConfigError(f"{field} ({value!r}) must be a duration")


def _show(value: timedelta) -> str:
    return format_duration(value)


def _require_positive(field: str, value: timedelta) -> None:
    if value <= timedelta(0):
        raise ConfigError(f"{field} ({_show(value)}) must be positive")


@dataclass(frozen=True, init=False)
class LockConfig:
    """How long a once-per-tick claim may be held (atMostFor), how long it is held at least
    (atLeastFor) and whether it is kept alive while the handler runs."""

    at_most_for: timedelta
    at_least_for: timedelta
    keep_alive: bool

    def __init__(
        self,
        *,
        at_most_for: DurationLike,
        at_least_for: DurationLike = 0,
        keep_alive: bool = True,
    ) -> None:
        at_most = to_timedelta("atMostFor", at_most_for)
        at_least = to_timedelta("atLeastFor", at_least_for)
        object.__setattr__(self, "at_most_for", at_most)
        object.__setattr__(self, "at_least_for", at_least)
        object.__setattr__(self, "keep_alive", bool(keep_alive))
        _require_positive("atMostFor", at_most)
        if at_least < timedelta(0):
            raise ConfigError(f"atLeastFor ({_show(at_least)}) must not be negative")
        if at_least > at_most:
            raise ConfigError(
                f"atLeastFor ({_show(at_least)}) must not exceed atMostFor ({_show(at_most)})"
            )

    @property
    def lease_duration_s(self) -> int:
        """atMostFor as the Lease's leaseDurationSeconds (whole seconds, rounded up)."""
        return whole_seconds(self.at_most_for.total_seconds())

    @property
    def renew_interval_s(self) -> float:
        """Keep-alive renews every atMostFor / 3."""
        return self.at_most_for.total_seconds() / 3


@dataclass(frozen=True, init=False)
class ElectionConfig:
    """client-go's election timing: a leader renews every retryPeriod and stops leading when
    it has not renewed for renewDeadline; a standby takes over after leaseDuration without a
    change to the Lease. Requires leaseDuration >= renewDeadline + 1s (the margin a client-go
    elector on the same Lease needs, see `MIXED_FLEET_MARGIN`) and renewDeadline >
    1.2 * retryPeriod."""

    lease_duration: timedelta
    renew_deadline: timedelta
    retry_period: timedelta

    def __init__(
        self,
        *,
        lease_duration: DurationLike = timedelta(seconds=15),
        renew_deadline: DurationLike = timedelta(seconds=10),
        retry_period: DurationLike = timedelta(seconds=2),
    ) -> None:
        lease = to_timedelta("leaseDuration", lease_duration)
        renew = to_timedelta("renewDeadline", renew_deadline)
        retry = to_timedelta("retryPeriod", retry_period)
        object.__setattr__(self, "lease_duration", lease)
        object.__setattr__(self, "renew_deadline", renew)
        object.__setattr__(self, "retry_period", retry)
        _require_positive("leaseDuration", lease)
        _require_positive("renewDeadline", renew)
        _require_positive("retryPeriod", retry)
        if lease < renew + MIXED_FLEET_MARGIN:
            raise ConfigError(
                f"leaseDuration ({_show(lease)}) must be at least renewDeadline "
                f"({_show(renew)}) + {_show(MIXED_FLEET_MARGIN)}: a client-go elector on the "
                "same Lease judges changes at 1-second resolution, so a smaller margin lets it "
                "take over while our leader still believes it leads"
            )
        jittered = retry * JITTER_FACTOR
        if renew <= jittered:
            raise ConfigError(
                f"renewDeadline ({_show(renew)}) must be greater than "
                f"{JITTER_FACTOR:g} × retryPeriod ({_show(retry)} = {_show(jittered)})"  # noqa: RUF001
            )

    @property
    def lease_duration_s(self) -> int:
        """leaseDuration as leaseDurationSeconds (whole seconds, rounded up)."""
        return whole_seconds(self.lease_duration.total_seconds())
