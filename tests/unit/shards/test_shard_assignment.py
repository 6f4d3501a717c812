"""Shard assignment and the plan per instant (docs/claims.md): pure, no clock."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models._enums import Bucket, Coordination, StoreUnavailablePolicy
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import Claim, Observation, Skip, decide_claim
from leasecron.models.leases import LeaseRecord
from leasecron.models.schedules import Schedule
from leasecron.models.shards import (
    ClaimTraits,
    check_shards,
    claims_through_shard,
    due_at,
    group_by_shard,
    jobs_due,
    shard_lease_name,
    shard_of,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SHORT = ClaimTraits(
    bucket=Bucket.ONCE_PER_TICK,
    coordination=Coordination.LOCK,
    keep_alive=False,
    at_least_for=timedelta(0),
    on_store_unavailable=StoreUnavailablePolicy.SKIP,
)


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


def test_only_short_lock_jobs_that_skip_on_outages_are_claimed_through_a_shard() -> None:
    assert claims_through_shard(SHORT, shards=16)
    assert not claims_through_shard(SHORT, shards=0)
    changes: list[dict[str, object]] = [
        {"keep_alive": True},
        {"at_least_for": timedelta(seconds=5)},
        {"on_store_unavailable": StoreUnavailablePolicy.RUN_LOCALLY},
        {"coordination": Coordination.LEADER},
        {"bucket": Bucket.EVERY_REPLICA},
    ]
    for change in changes:
        traits = ClaimTraits(**{**SHORT.__dict__, **change})  # type: ignore[arg-type]
        assert not claims_through_shard(traits, shards=16), change


def test_the_holder_of_an_instant_runs_exactly_the_jobs_of_its_shard_due_then() -> None:
    every_second = Schedule.parse("@every 1s")
    hourly = Schedule.parse("0 * * * *")
    schedules = {f"s-{i}": every_second for i in range(40)} | {f"h-{i}": hourly for i in range(40)}
    on_the_hour = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
    past_it = on_the_hour + timedelta(seconds=1)
    union_hour: set[str] = set()
    for shard in range(4):
        due = jobs_due(schedules, on_the_hour, shard=shard, shards=4)
        assert all(shard_of(n, shards=4) == shard for n in due)
        union_hour |= set(due)
        later = jobs_due(schedules, past_it, shard=shard, shards=4)
        assert all(n.startswith("s-") for n in later)
    assert union_hour == set(schedules)
    assert due_at(hourly, on_the_hour) and not due_at(hourly, past_it)


def test_due_jobs_are_grouped_into_one_claim_per_shard_and_instant() -> None:
    t1, t2 = NOW, NOW + timedelta(seconds=1)
    due = [(f"j-{i}", t1) for i in range(50)] + [("late", t2)]
    groups = group_by_shard(due, shards=4)
    assert len(groups) <= 5
    assert sorted(n for names in groups.values() for n in names) == sorted(n for n, _ in due)
    assert groups[(shard_of("late", shards=4), t2)] == ["late"]


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
