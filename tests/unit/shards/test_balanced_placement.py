"""Which replica claims each shard of an instant first (`balanced_first`): the runs of an
instant spread within ±20 % of the mean when the group has enough shards per replica
(docs/explanation/claim-engine.md), every replica computes the same placement, and a
shard only goes to a replica able to run its jobs. Against plain rendezvous per (shard,
instant), which spread the same load from about -45 % to +55 %."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from leasecron.models.decisions import balanced_first, placed_rank, rendezvous_rank
from leasecron.models.groups import shard_ref
from leasecron.models.shards import DEFAULT_SHARDS, MAX_SHARDS, SHARDS_PER_REPLICA, shards_for


def weights(jobs: int, shards: int) -> dict[str, int]:
    """Runs due per shard Lease when `jobs` jobs are due at one instant."""
    return dict(Counter(shard_ref("g", f"job-{i:05d}", shards=shards).lease for i in range(jobs)))


def loads(placed: dict[str, str], due: dict[str, int], members: list[str]) -> list[int]:
    out = dict.fromkeys(members, 0)
    for key, member in placed.items():
        out[member] += due[key]
    return list(out.values())


def spread(jobs: int, shards: int, replicas: int) -> tuple[float, float]:
    members = [f"replica-{i}" for i in range(replicas)]
    due = weights(jobs, shards)
    per = loads(balanced_first(due, dict.fromkeys(due, members)), due, members)
    mean = jobs / replicas
    return min(per) / mean - 1, max(per) / mean - 1


@pytest.mark.parametrize("jobs", [1000, 10_000])
@pytest.mark.parametrize("replicas", [1, 2, 3, 5, 8, 10, 16, 20, 32, 50])
def test_128_shards_spread_an_instant_within_20_percent_for_1_to_50_replicas(
    jobs: int, replicas: int
) -> None:
    low, high = spread(jobs, 128, replicas)
    assert low >= -0.2, (low, high)
    assert high <= 0.2, (low, high)


@pytest.mark.parametrize("jobs", [1000, 10_000])
@pytest.mark.parametrize("replicas", [1, 2, 5, 10, 20, 32])
def test_64_shards_spread_an_instant_within_20_percent_for_up_to_32_replicas(
    jobs: int, replicas: int
) -> None:
    low, high = spread(jobs, 64, replicas)
    assert low >= -0.2, (low, high)
    assert high <= 0.2, (low, high)


@pytest.mark.parametrize("replicas", [1, 2, 3, 5, 8])
def test_the_default_16_shards_spread_1000_jobs_within_20_percent_for_up_to_8_replicas(
    replicas: int,
) -> None:
    low, high = spread(1000, 16, replicas)
    assert low >= -0.2, (low, high)
    assert high <= 0.2, (low, high)


def test_plain_rendezvous_per_instant_spreads_the_same_instant_far_wider() -> None:
    """What the placement replaces: the replica of rank 0 for each (shard, instant)."""
    members = [f"replica-{i}" for i in range(5)]
    due = weights(1000, 16)
    placed = {
        key: next(m for m in members if rendezvous_rank(f"{key}@t", m, members) == 0) for key in due
    }
    per = loads(placed, due, members)
    assert max(per) / min(per) > 1.5, per


def test_every_replica_computes_the_same_placement_whatever_the_order_it_lists() -> None:
    members = [f"replica-{i}" for i in range(7)]
    due = weights(500, 32)
    expected = balanced_first(due, dict.fromkeys(due, members))
    shuffled = members[:]
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        items = list(due.items())
        random.Random(seed).shuffle(items)
        assert balanced_first(dict(items), dict.fromkeys(due, shuffled)) == expected


def test_a_shard_goes_only_to_a_replica_that_registered_its_handlers() -> None:
    due = {"a": 50, "b": 5, "c": 5, "d": 5}
    able = {"a": ["r1", "r2"], "b": ["r3"], "c": ["r1", "r2", "r3"], "d": []}
    placed = balanced_first(due, able)
    assert placed["b"] == "r3"
    assert placed["a"] in {"r1", "r2"}
    assert "d" not in placed  # nobody may take it: the claim falls back to rendezvous
    assert balanced_first({}, {}) == {}


def test_the_placed_replica_goes_first_and_the_others_follow_in_rendezvous_order() -> None:
    members = ["r0", "r1", "r2", "r3"]
    ranks = {m: placed_rank("k", m, members, first="r2") for m in members}
    assert ranks["r2"] == 0
    assert sorted(ranks.values()) == [0, 1, 2, 3]
    # Without a placement, or when the placed replica is gone: plain rendezvous.
    for m in members:
        assert placed_rank("k", m, members, first=None) == rendezvous_rank("k", m, members)
        assert placed_rank("k", m, members, first="gone") == rendezvous_rank("k", m, members)


@pytest.mark.parametrize("replicas", [1, 2, 3, 5, 6, 7, 10, 12, 20, 25, 33, 50])
@pytest.mark.parametrize("jobs", [1000, 10_000])
def test_the_count_shards_for_gives_spreads_an_instant_within_20_percent(
    replicas: int, jobs: int
) -> None:
    """The sizing rule the docs and `leasecron shards` give: `SHARDS_PER_REPLICA` per replica,
    as a power of two."""
    shards = shards_for(replicas)
    assert shards >= SHARDS_PER_REPLICA * replicas
    low, high = spread(jobs, shards, replicas)
    assert low >= -0.2, (shards, low, high)
    assert high <= 0.2, (shards, low, high)


def test_the_default_count_fits_up_to_six_replicas_by_the_rule() -> None:
    assert shards_for(1) == DEFAULT_SHARDS
    assert DEFAULT_SHARDS >= SHARDS_PER_REPLICA * 6
    assert shards_for(7) == 2 * DEFAULT_SHARDS
    assert shards_for(10_000) == MAX_SHARDS


def moves(jobs: int, shards: int, *, seed: int) -> list[tuple[str, str, set[str], set[str]]]:
    """Replicas joining up to the rule's count (`shards // SHARDS_PER_REPLICA`), then leaving
    and joining in turn, each placement made from the one before (the shard Leases'
    claimers): per change, (join or leave, the replica, the shards that moved, the
    shards that replica took or gave up)."""
    due, rnd = weights(jobs, shards), random.Random(seed)
    changes = [("join", f"replica-{i}") for i in range(shards // SHARDS_PER_REPLICA)]
    for i in range(20):
        changes += [("leave", ""), ("join", f"late-{i}")]
    members: list[str] = []
    previous: dict[str, str] = {}
    seen = []
    for change, member in changes:
        if change == "leave":
            member = rnd.choice(members)
            members.remove(member)
        else:
            members.append(member)
        placed = balanced_first(due, dict.fromkeys(due, members), previous)
        per, mean = loads(placed, due, members), jobs / len(members)
        assert 0.8 * mean <= min(per) and max(per) <= 1.2 * mean, (change, len(members), per)
        moved = {key for key in due if previous and previous[key] != placed[key]}
        own = {k for k in due if (placed if change == "join" else previous).get(k) == member}
        if previous and len(members) > 1:
            seen.append((change, member, moved, own))
        previous = placed
    return seen


@pytest.mark.parametrize(
    ("jobs", "shards"), [(1000, 16), (10_000, 16), (1000, 32), (10_000, 32), (1000, 64)]
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_replica_joining_takes_only_its_share_and_one_leaving_hands_on_only_its_own(
    jobs: int, shards: int, seed: int
) -> None:
    """Within the sizing rule, a shard moves only to the replica that joined or away from
    the one that left, and the spread stays within 20 %. Placed afresh at each change
    (rendezvous with bounded loads, before the claimers were kept), about half the shards
    that moved went between the other replicas: a sixth replica joining 32 shards changed
    the first claimer of 9 where it took 5."""
    for change, member, moved, own in moves(jobs, shards, seed=seed):
        assert moved <= own, (change, member, sorted(moved - own))
        if change == "join":
            assert own, member  # it took its share


@pytest.mark.parametrize("jobs", [1000, 10_000])
def test_with_many_replicas_a_change_moves_another_shard_only_now_and_then(jobs: int) -> None:
    """128 shards, up to 25 replicas: where keeping the spread within 20 % needs it, a shard
    of another replica moves too (10 of 1419 moves with 1000 jobs, in three runs)."""
    for seed in (1, 2, 3):
        changes = moves(jobs, 128, seed=seed)
        moved = sum(len(m) for _, _, m, _ in changes)
        beyond = sum(len(m - own) for _, _, m, own in changes)
        assert beyond <= moved / 50, (beyond, moved)
