"""Shard assignment, the plan per instant and the hand-over records between a job's Lease and
a shard Lease (docs/design.md §5.3): pure, no clock."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models._enums import Bucket, Coordination, StoreUnavailablePolicy
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import Claim, Observation, Skip, decide_claim
from leasecron.models.leases import LeaseRecord
from leasecron.models.schedules import Schedule
from leasecron.models.shards import (
    ANNOTATION_RELEASED,
    ANNOTATION_SHARDED,
    ClaimTraits,
    ShardGate,
    ShardRef,
    check_shards,
    claims_through_shard,
    due_at,
    format_gate,
    format_released,
    gate_of_group,
    parse_gate,
    parse_released,
    runs_under_shard,
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


def test_a_job_is_due_at_an_instant_exactly_when_its_schedule_has_a_tick_then() -> None:
    hourly = Schedule.parse("0 * * * *")
    on_the_hour = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
    assert due_at(hourly, on_the_hour)
    assert not due_at(hourly, on_the_hour + timedelta(seconds=1))
    assert not due_at(hourly, on_the_hour - timedelta(microseconds=1))
    assert due_at(Schedule.parse("@every 1s"), on_the_hour + timedelta(seconds=1))


GATE = ShardGate(
    ref=ShardRef(lease="leasecron-shard-default-4-1", shard=1, shards=4), start=NOW, token=7
)


def test_a_gate_reads_back_as_written_and_a_corrupt_one_reads_as_none() -> None:
    annotations = {ANNOTATION_SHARDED: format_gate(GATE)}
    assert parse_gate(annotations) == GATE
    good = json.loads(format_gate(GATE))
    for key, value in [
        ("lease", ""),
        ("lease", 3),
        ("shard", 4),
        ("shard", -1),
        ("shards", "4"),
        ("token", -1),
        ("token", True),
        ("from", "yesterday"),
    ]:
        broken = {ANNOTATION_SHARDED: json.dumps({**good, key: value})}
        assert parse_gate(broken) is None, (key, value)
    assert parse_gate({ANNOTATION_SHARDED: "{not json"}) is None
    assert parse_gate({ANNOTATION_SHARDED: "[]"}) is None
    assert parse_gate({}) is None


def test_released_handovers_read_back_and_a_corrupt_list_reads_as_none() -> None:
    released = {"a": NOW, "b": NOW + timedelta(hours=1)}
    assert parse_released({ANNOTATION_RELEASED: format_released(released)}) == released
    assert parse_released({}) == {}
    assert parse_released({ANNOTATION_RELEASED: "nope"}) is None
    assert parse_released({ANNOTATION_RELEASED: json.dumps({"a": "soon"})}) is None


def test_a_shard_claim_runs_a_job_only_from_its_gate_on_and_not_once_released() -> None:
    lease = GATE.lease
    before, at, after = NOW - timedelta(seconds=1), NOW, NOW + timedelta(seconds=1)
    assert runs_under_shard("j", at, gate=GATE, lease=lease, released={}, token=8)
    assert runs_under_shard("j", after, gate=GATE, lease=lease, released={}, token=8)
    assert not runs_under_shard("j", before, gate=GATE, lease=lease, released={}, token=8)
    assert not runs_under_shard("j", at, gate=None, lease=lease, released={}, token=8)
    assert not runs_under_shard(
        "j", at, gate=GATE, lease="leasecron-shard-default-8-1", released={}, token=8
    )
    assert not runs_under_shard("j", at, gate=GATE, lease=lease, released={"j": NOW}, token=8)
    assert not runs_under_shard("j", at, gate=GATE, lease=lease, released=None, token=8)
    # A release of an earlier hand-over does not stop a later one.
    earlier = NOW - timedelta(hours=1)
    assert runs_under_shard("j", at, gate=GATE, lease=lease, released={"j": earlier}, token=8)
    assert runs_under_shard("j", at, gate=GATE, lease=lease, released={"other": NOW}, token=8)
    # A claim whose token is not above the job's token on its own Lease (7) runs nothing.
    assert not runs_under_shard("j", at, gate=GATE, lease=lease, released={}, token=7)


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


def test_a_gate_counts_only_when_it_names_the_shard_lease_of_its_group() -> None:
    ours = ShardGate(
        ref=ShardRef(lease=shard_lease_name("billing", 2, shards=8), shard=2, shards=8),
        start=NOW,
    )
    assert gate_of_group(ours, "billing") == ours
    assert gate_of_group(ours, "reports") is None
    elsewhere = ShardGate(ref=ShardRef(lease="leasecron-job-x", shard=2, shards=8), start=NOW)
    assert gate_of_group(elsewhere, "billing") is None
    assert gate_of_group(None, "billing") is None
