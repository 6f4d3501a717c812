"""The group record as a pure value: what its annotations say, what a claim may write without
raising the ceiling, where a Lease created now starts, which instants the floor tick takes, and
the record after a change of shard count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.groups import (
    ANNOTATION_FLOOR_TICK,
    ANNOTATION_OWN_LEASES,
    ANNOTATION_RETIRED,
    ANNOTATION_SHARDS,
    ANNOTATION_TOKEN_CEILING,
    MAX_TOKEN,
    TOKEN_BLOCK,
    GroupRecordError,
    GroupState,
    format_group,
    group_lease_name,
    moved_jobs,
    moved_tick,
    own_ref,
    parse_group,
    replaced,
    retired,
    shard_ref,
)
from leasecron.models.shards import ANNOTATION_MOVED, shard_lease_name

T = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_a_record_reads_back_what_it_was_written_with() -> None:
    state = GroupState(shards=8, ceiling=20_000, floor_tick=T)
    assert parse_group(format_group(state)) == state


def test_a_record_without_ceiling_or_floor_starts_at_zero_with_no_floor() -> None:
    assert parse_group({ANNOTATION_SHARDS: "4"}) == GroupState(shards=4)
    assert format_group(GroupState(shards=4))[ANNOTATION_FLOOR_TICK] is None


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({}, ANNOTATION_SHARDS),
        ({ANNOTATION_SHARDS: "four"}, "'four'"),
        ({ANNOTATION_SHARDS: "0"}, "'0'"),
        ({ANNOTATION_SHARDS: "2000"}, "'2000'"),
        ({ANNOTATION_SHARDS: "4", ANNOTATION_TOKEN_CEILING: "-1"}, ANNOTATION_TOKEN_CEILING),
        ({ANNOTATION_SHARDS: "4", ANNOTATION_FLOOR_TICK: "noon"}, "'noon'"),
    ],
)
def test_a_corrupt_record_is_refused_with_the_annotation_and_value_named(
    annotations: dict[str, str], named: str
) -> None:
    with pytest.raises(GroupRecordError, match=named):
        parse_group(annotations)


def test_a_token_up_to_the_ceiling_needs_no_raise_and_one_above_raises_it_by_a_block() -> None:
    state = GroupState(shards=4, ceiling=100)
    assert state.covers(100) and not state.covers(101)
    assert state.raised(101).ceiling == 101 + TOKEN_BLOCK


def test_the_ceiling_stops_at_the_largest_lease_transitions() -> None:
    assert GroupState(shards=1).raised(MAX_TOKEN).ceiling == MAX_TOKEN
    with pytest.raises(GroupRecordError, match="above the largest"):
        GroupState(shards=1).raised(MAX_TOKEN + 1)


def test_a_shard_lease_created_now_starts_above_every_token_the_ceiling_allowed() -> None:
    assert GroupState(shards=4, ceiling=10_005).first_token == 10_006


def test_instants_at_or_before_the_floor_tick_are_taken() -> None:
    state = GroupState(shards=4, floor_tick=T)
    assert state.takes(T) and state.takes(T - timedelta(seconds=1))
    assert not state.takes(T + timedelta(seconds=1))
    assert not GroupState(shards=4).takes(T)


def test_after_a_count_change_the_floor_is_the_highest_claimed_instant_and_tokens_never_drop() -> (
    None
):
    before = GroupState(shards=4, ceiling=10_000, floor_tick=T - timedelta(hours=1))
    after = replaced(before, shards=8, ticks=[T, None, T - timedelta(minutes=5)], tokens=[7, 12])
    assert after == GroupState(shards=8, ceiling=10_000, floor_tick=T)
    # tokens written before any ceiling existed raise it; an old floor is kept when higher
    after = replaced(before, shards=2, ticks=[], tokens=[20_000])
    assert after == GroupState(shards=2, ceiling=20_000, floor_tick=before.floor_tick)


def test_a_count_change_to_an_impossible_count_is_refused() -> None:
    with pytest.raises(GroupRecordError, match="shards"):
        replaced(GroupState(shards=4), shards=0, ticks=[], tokens=[])


def test_the_shard_of_a_job_follows_the_recorded_count() -> None:
    ref = GroupState(shards=8).ref("billing", "nightly")
    assert ref == shard_ref("billing", "nightly", shards=8)
    assert ref.lease == shard_lease_name("billing", ref.shard, shards=8)
    assert group_lease_name("billing") == "leasecron-group-billing"


def test_a_shard_lease_is_retired_when_it_carries_the_annotation() -> None:
    assert retired({ANNOTATION_RETIRED: "replaced by 8 shards"})
    assert not retired({})


def test_jobs_on_leases_of_their_own_read_back_and_are_placed_there_whatever_the_count() -> None:
    state = GroupState(shards=8, ceiling=5, own=frozenset({"billing", "mail"}))
    assert format_group(state)[ANNOTATION_OWN_LEASES] == '["billing", "mail"]'
    assert parse_group(format_group(state)) == state
    ref = state.ref("g", "billing")
    assert ref == own_ref("g", "billing")
    assert (ref.lease, ref.job) == ("leasecron-shard-g-job-billing", "billing")
    assert state.ref("g", "other") == shard_ref("g", "other", shards=8)
    after = replaced(state, shards=2, ticks=[T], tokens=[7])
    assert after.ref("g", "billing") == ref  # a count change does not move it
    assert after.ref("g", "other") == shard_ref("g", "other", shards=2)
    assert state.placement != GroupState(shards=8, ceiling=5).placement


@pytest.mark.parametrize("raw", ["billing", '{"a": 1}', '["ok", 3]', '[""]'])
def test_a_list_of_own_leases_that_does_not_read_is_refused_with_its_value(raw: str) -> None:
    with pytest.raises(GroupRecordError, match=ANNOTATION_OWN_LEASES):
        parse_group({ANNOTATION_SHARDS: "4", ANNOTATION_OWN_LEASES: raw})


def test_a_shard_lease_says_which_jobs_moved_from_it_and_the_instant_it_had_claimed() -> None:
    annotations = {
        ANNOTATION_MOVED + "billing": "2026-01-01T12:00:00Z",
        ANNOTATION_MOVED + "mail": "",
        "leasecron.dev/tick": "2026-01-01T12:00:05Z",
    }
    assert moved_jobs(annotations) == {"billing", "mail"}
    assert moved_tick(annotations, "billing") == T
    assert moved_tick(annotations, "mail") is None
