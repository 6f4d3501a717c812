"""The nested parts of a ScheduledJob spec: claim and election timings, catch-up and history,
with the bounds each duration must respect.

Owns the rules that involve only one part (atLeastFor <= atMostFor, leaseDuration >=
renewDeadline + 1s, renewDeadline > 1.2 x retryPeriod, sane bounds). Re-exported by `specs`,
which owns the rules that span the whole spec.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, StrictBool, StrictInt, ValidationInfo, field_validator

from leasecron.models._enums import CatchUpPolicy
from leasecron.models._fields import Duration, ResourceModel, show
from leasecron.models.configs import MIXED_FLEET_MARGIN

MAX_LOCK = timedelta(days=7)
MAX_LEASE = timedelta(hours=1)
MIN_RETRY = timedelta(milliseconds=100)
SECOND = timedelta(seconds=1)


def within(value: timedelta, *, low: timedelta, high: timedelta, whole: bool = False) -> timedelta:
    """Bounds shared by duration fields; messages name the limits as durations."""
    if value < low:
        raise ValueError(f"must be at least {show(low)}")
    if value > high:
        raise ValueError(f"must be at most {show(high)}")
    if whole and value % SECOND:
        raise ValueError("must be a whole number of seconds (Lease durations are in seconds)")
    return value


class LockSpec(ResourceModel):
    """The per-tick claim of a once-per-tick job (ShedLock's lockAtMostFor/lockAtLeastFor)."""

    at_most_for: Duration = Field(
        default=timedelta(minutes=15),
        description="How long a claim holds without renewal; a replica that dies mid-run frees "
        "the job after this long. Whole seconds, 1s to 7 days.",
    )
    at_least_for: Duration = Field(
        default=timedelta(0),
        description="How long the Lease stays held after the tick started, even if the run "
        "finished sooner. At most atMostFor.",
    )
    keep_alive: StrictBool = Field(
        default=True,
        description="Renew the claim every atMostFor/3 while the handler runs.",
    )

    @field_validator("at_most_for")
    @classmethod
    def _at_most_for(cls, value: timedelta) -> timedelta:
        return within(value, low=SECOND, high=MAX_LOCK, whole=True)

    @field_validator("at_least_for")
    @classmethod
    def _at_least_for(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        most = info.data.get("at_most_for")
        if most is not None and value > most:
            raise ValueError(f"must not exceed spec.lock.atMostFor ({show(most)})")
        return value


class ElectionSpec(ResourceModel):
    """Leader election timings (client-go's LeaseDuration, RenewDeadline, RetryPeriod)."""

    lease_duration: Duration = Field(
        default=timedelta(seconds=15),
        description="How long standbys wait after the last observed renewal before taking "
        "over. Whole seconds, 1s to 1h, and at least renewDeadline + 1s.",
    )
    renew_deadline: Duration = Field(
        default=timedelta(seconds=10),
        validate_default=True,
        description="How long the leader keeps trying to renew before it stops leading. "
        "At least 1s less than leaseDuration: a client-go elector on the same Lease judges "
        "changes at 1-second resolution.",
    )
    retry_period: Duration = Field(
        default=timedelta(seconds=2),
        validate_default=True,
        description="How often the leader renews and candidates retry. At least 100ms; "
        "1.2 x retryPeriod must be less than renewDeadline.",
    )

    @field_validator("lease_duration")
    @classmethod
    def _lease_duration(cls, value: timedelta) -> timedelta:
        return within(value, low=SECOND, high=MAX_LEASE, whole=True)

    @field_validator("renew_deadline")
    @classmethod
    def _renew_deadline(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        lease = info.data.get("lease_duration")
        if lease is not None and value + MIXED_FLEET_MARGIN > lease:
            raise ValueError(
                f"must be at least {show(MIXED_FLEET_MARGIN)} less than "
                f"spec.election.leaseDuration ({show(lease)}): a client-go elector on the same "
                "Lease judges changes at 1-second resolution"
            )
        return within(value, low=MIN_RETRY, high=MAX_LEASE)

    @field_validator("retry_period")
    @classmethod
    def _retry_period(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        renew = info.data.get("renew_deadline")
        if renew is not None and value * 6 >= renew * 5:
            raise ValueError(
                f"is too long: 1.2 x retryPeriod must be less than spec.election.renewDeadline "
                f"({show(renew)})"
            )
        return within(value, low=MIN_RETRY, high=MAX_LEASE)


class CatchUpSpec(ResourceModel):
    """What runs for ticks that no replica could run in time."""

    policy: CatchUpPolicy = Field(
        default=CatchUpPolicy.LATEST,
        description="None: only the current tick. Latest: the current tick stands for the "
        "missed ones. All: each missed tick in order, at most maxTicks.",
    )
    max_ticks: StrictInt = Field(
        default=10, ge=1, le=1000, description="Most missed ticks run under policy All."
    )


MAX_RETRIES = 10
MAX_BACKOFF = timedelta(hours=1)


class RetrySpec(ResourceModel):
    """Retries of a failed run within its tick (CronJob's backoffLimit, with a back-off)."""

    limit: StrictInt = Field(
        default=0,
        ge=0,
        le=MAX_RETRIES,
        description=f"Attempts after the first when a run fails or times out, 0 to {MAX_RETRIES}.",
    )
    backoff: Duration = Field(
        default=timedelta(seconds=10),
        description="Delay before the first retry, doubled before each later one. 1s to 1h.",
    )

    @field_validator("backoff")
    @classmethod
    def _backoff(cls, value: timedelta) -> timedelta:
        return within(value, low=SECOND, high=MAX_BACKOFF)

    def delay(self, attempt: int) -> timedelta:
        """The wait before attempt number `attempt` (2 is the first retry)."""
        doublings: int = max(0, attempt - 2)
        return self.backoff * (1 << doublings)


class HistorySpec(ResourceModel):
    """How many finished JobRuns the operator keeps per outcome."""

    succeeded: StrictInt = Field(default=3, ge=0, le=1000, description="Succeeded runs kept.")
    failed: StrictInt = Field(
        default=3, ge=0, le=1000, description="Runs kept that did not succeed."
    )
