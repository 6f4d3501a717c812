"""The first claim on a shard Lease that never recorded an instant: its run starts before
its record is written only when the Lease was made well before the instant (no Lease before
it can have claimed that instant); else the record is created first and decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leasecron.coordination import Grant, ReleaseResult
from leasecron.models.clocks import FakeClock
from leasecron.runtime._shards import _FRESH_MARGIN, _unclaimed_before

TICK = datetime(2026, 1, 1, 12, tzinfo=UTC)


class NoOwner:
    async def renew(self, grant: Grant) -> bool:
        return False

    async def release(self, grant: Grant) -> ReleaseResult:
        return ReleaseResult.FREED

    def keep_alive(self, grant: Grant, *, listeners: object = ()) -> object:
        raise NotImplementedError


def grant(*, created: datetime | None) -> Grant:
    clock = FakeClock()
    return Grant(
        owner=NoOwner(),  # type: ignore[arg-type]
        namespace="ns",
        name="leasecron-shard-g-16-3",
        token=1,
        tick=TICK,
        holder="replica-1",
        acquired_at=clock.monotonic(),
        expires_at=clock.monotonic() + 10,
        lease_created=created,
        clock=clock,
    )


def test_a_lease_made_well_before_the_instant_cannot_have_a_predecessor_that_claimed_it() -> None:
    assert _unclaimed_before(grant(created=TICK - _FRESH_MARGIN - timedelta(seconds=1)))


def test_a_lease_made_around_the_instant_or_by_the_claim_itself_is_not_trusted() -> None:
    assert not _unclaimed_before(grant(created=TICK - _FRESH_MARGIN))
    assert not _unclaimed_before(grant(created=TICK - timedelta(seconds=1)))
    assert not _unclaimed_before(grant(created=TICK + timedelta(seconds=3)))
    assert not _unclaimed_before(grant(created=None))  # the claim created the Lease
