"""Shard assignment and the claim decision of a shard instant (docs/design.md §5.3): pure,
no clock."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.configs import LockConfig
from leasecron.models.decisions import Claim, Observation, Skip, decide_claim
from leasecron.models.leases import LeaseRecord
from leasecron.models.schedules import Schedule
from leasecron.models.shards import check_shards, due_at, shard_lease_name, shard_of

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_a_job_always_lands_in_the_same_shard_and_jobs_spread_over_all_shards() -> None:
    names = [f"job-{i}" for i in range(1000)]
    first = [shard_of(n, shards=16) for n in names]
    assert first == [shard_of(n, shards=16) for n in names]
    spread = Counter(first)
    assert set(spread) == set(range(16))
    assert max(spread.values()) < 2 * 1000 / 16


def test_the_shard_count_is_part_of_the_shard_lease_name() -> None:
    assert shard_lease_name("billing", 3, shards=16) == "leasecron-shard-billing-16-3"
    assert shard_lease_name("billing", 3, shards=8) != shard_lease_name("billing", 3, shards=16)


@pytest.mark.parametrize("bad", [-1, 1025, 2.5, True, "16"])
def test_a_bad_shard_count_is_refused_with_its_value(bad: object) -> None:
    with pytest.raises(ValueError, match=r"shards \(.*\) must be"):
        check_shards(bad)  # type: ignore[arg-type]


def test_a_job_is_due_at_an_instant_exactly_when_its_schedule_has_a_tick_then() -> None:
    hourly = Schedule.parse("0 * * * *")
    on_the_hour = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
    assert due_at(hourly, on_the_hour)
    assert not due_at(hourly, on_the_hour + timedelta(seconds=1))
    assert not due_at(hourly, on_the_hour - timedelta(microseconds=1))
    assert due_at(Schedule.parse("@every 1s"), on_the_hour + timedelta(seconds=1))


def test_a_shard_holder_claims_the_next_instant_over_its_own_live_grant_and_others_do_not() -> None:
    config = LockConfig(at_most_for=10)
    record = LeaseRecord(
        name="s",
        namespace="ns",
        holder="me",
        lease_duration_s=10,
        transitions=7,
        tick=NOW,
        resource_version="1",
    )
    live = Observation(record=record, observed_at=100.0)

    def claim(identity: str, own: tuple[int, ...]) -> Skip | Claim:
        return decide_claim(
            current=live,
            tick=NOW + timedelta(seconds=1),
            identity=identity,
            config=config,
            now_mono=101.0,
            now_wall=NOW + timedelta(seconds=1),
            name="s",
            namespace="ns",
            known={7},
            own=own,
        )

    mine = claim("me", (7,))
    assert isinstance(mine, Claim) and mine.token == 8 and not mine.replaces_orphan
    assert claim("me", ()) == Skip("live_grant")
    assert claim("other", (7,)) == Skip("live_grant")
