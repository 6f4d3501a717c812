"""Election steps (client-go's tryAcquireOrRenew without I/O) and rendezvous ranking."""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import UTC, datetime

import pytest

from leasecron.models.configs import ElectionConfig
from leasecron.models.decisions import (
    Acquire,
    Observation,
    Renew,
    StandBy,
    decide_election,
    rendezvous_rank,
)
from leasecron.models.leases import LeaseRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)


def step(
    current: Observation | None, *, leading: bool = False, now: float = 100.0, job: bool = False
) -> Acquire | Renew | StandBy:
    return decide_election(
        current=current,
        leading=leading,
        identity="me",
        config=CONFIG,
        now_mono=now,
        now_wall=NOW,
        name="l",
        namespace="ns",
        job=job,
    )


def seen(holder: str, *, at: float = 99.0, transitions: int = 4, **kw: object) -> Observation:
    record = LeaseRecord(
        name="l",
        namespace="ns",
        holder=holder,
        lease_duration_s=kw.pop("duration", 3),  # type: ignore[arg-type]
        transitions=transitions,
        resource_version="5",
        acquire_time=kw.pop("acquired", None),  # type: ignore[arg-type]
    )
    return Observation(record=record, observed_at=at)


def test_without_a_lease_the_first_candidate_creates_it_with_zero_transitions() -> None:
    decision = step(None)
    assert isinstance(decision, Acquire)
    assert decision.create
    assert (decision.record.holder, decision.record.transitions) == ("me", 0)
    assert decision.record.lease_duration_s == 3


def test_a_live_foreign_lease_means_standing_by_until_local_expiry() -> None:
    assert step(seen("other", at=99.0)) == StandBy("other", until=102.0)


def test_an_expired_foreign_lease_is_taken_with_one_more_transition() -> None:
    decision = step(seen("other", at=97.0), now=100.0)
    assert isinstance(decision, Acquire)
    assert not decision.create
    assert decision.record.transitions == 5
    assert decision.record.resource_version == "5"
    assert (decision.record.holder, decision.record.lease_duration_s) == ("me", 3)
    assert decision.record.acquire_time == decision.record.renew_time == NOW


def test_a_foreign_lease_is_live_until_exactly_lease_duration_after_we_observed_it() -> None:
    # Observed at 97.0 with 3 s: live at 99.999, expired at 100.0 (client-go's expiry check).
    assert step(seen("other", at=97.0), now=99.999) == StandBy("other", until=100.0)
    assert isinstance(step(seen("other", at=97.0), now=100.0), Acquire)


def test_a_released_lease_is_taken_at_once() -> None:
    decision = step(seen("", at=99.99, duration=1), now=100.0)
    assert isinstance(decision, Acquire)
    assert (decision.record.holder, decision.record.transitions) == ("me", 5)
    assert (decision.create, decision.record.lease_duration_s) == (False, 3)


def test_the_leader_renews_keeping_acquire_time_and_transitions() -> None:
    decision = step(seen("me", acquired=NOW.replace(year=2025)), leading=True)
    assert isinstance(decision, Renew)
    assert (decision.record.holder, decision.record.lease_duration_s) == ("me", 3)
    assert decision.record.transitions == 4
    assert decision.record.acquire_time == NOW.replace(year=2025)
    assert decision.record.renew_time == NOW


def test_our_own_lease_from_a_term_we_gave_up_starts_a_new_term_with_a_new_token() -> None:
    decision = step(seen("me", at=99.5), leading=False)
    assert isinstance(decision, Acquire)
    assert (decision.record.holder, decision.record.transitions) == ("me", 5)
    assert decision.record.acquire_time == NOW


def test_a_leader_that_sees_another_live_holder_stands_by() -> None:
    assert step(seen("other", at=99.0), leading=True) == StandBy("other", until=102.0)


def test_a_corrupt_duration_is_treated_as_our_own_lease_duration() -> None:
    assert step(seen("other", at=97.5, duration=None), now=100.0) == StandBy("other", 100.5)


MEMBERS = [f"replica-{i}" for i in range(5)]


def test_rendezvous_ranks_are_a_permutation_agreed_by_every_member() -> None:
    ranks = sorted(rendezvous_rank("job/tick-1", m, MEMBERS) for m in MEMBERS)
    assert ranks == [0, 1, 2, 3, 4]
    assert rendezvous_rank("k", "replica-1", MEMBERS) == rendezvous_rank(
        "k", "replica-1", list(reversed(MEMBERS))
    )


def test_different_keys_spread_the_preferred_replica_over_the_members() -> None:
    preferred = Counter(
        next(m for m in MEMBERS if rendezvous_rank(f"job-{k}", m, MEMBERS) == 0)
        for k in range(1000)
    )
    assert set(preferred) == set(MEMBERS)
    assert min(preferred.values()) > 120  # 200 expected each


def test_removing_a_member_only_moves_the_keys_it_was_preferred_for() -> None:
    fewer = MEMBERS[:-1]
    for k in range(300):
        before = next(m for m in MEMBERS if rendezvous_rank(str(k), m, MEMBERS) == 0)
        after = next(m for m in fewer if rendezvous_rank(str(k), m, fewer) == 0)
        assert before == after or before == "replica-4"


def test_an_unknown_identity_ranks_after_every_member() -> None:
    assert rendezvous_rank("k", "stranger", MEMBERS) == 5


def _weight(key: str, member: str) -> int:
    """The documented weight: SHA-256 of `key NUL member`, read as a big-endian number."""
    return int.from_bytes(hashlib.sha256(f"{key}\x00{member}".encode()).digest(), "big")


@pytest.mark.parametrize("key", ["job/tick-1", "billing/nightly", "k", "ns/job@2026-01-01T00:00Z"])
def test_rendezvous_ranks_members_by_highest_random_weight_first(key: str) -> None:
    by_weight = sorted(MEMBERS, key=lambda m: _weight(key, m), reverse=True)
    assert [rendezvous_rank(key, m, MEMBERS) for m in by_weight] == [0, 1, 2, 3, 4]


def test_rendezvous_order_is_pinned_so_replicas_of_different_versions_agree() -> None:
    # Every replica must compute the same order, including across a rolling upgrade: a change
    # of hash or order is a protocol change, not a refactoring.
    order = {
        key: sorted(MEMBERS, key=lambda m: rendezvous_rank(key, m, MEMBERS))
        for key in (
            "job/tick-1",
            "billing/nightly",
        )
    }
    assert order == {
        "job/tick-1": ["replica-0", "replica-2", "replica-4", "replica-3", "replica-1"],
        "billing/nightly": ["replica-3", "replica-2", "replica-4", "replica-1", "replica-0"],
    }


def test_duplicate_members_count_once() -> None:
    duplicated = [MEMBERS[3], *MEMBERS, MEMBERS[0], MEMBERS[3], MEMBERS[1]]
    for key in ("job/tick-1", "billing/nightly", "k"):
        ranks = [rendezvous_rank(key, m, duplicated) for m in MEMBERS]
        assert ranks == [rendezvous_rank(key, m, MEMBERS) for m in MEMBERS]
        assert sorted(ranks) == [0, 1, 2, 3, 4]
    assert rendezvous_rank("k", "stranger", duplicated) == 5


def test_a_jobs_lease_created_by_a_replica_starts_at_token_1_as_one_the_operator_creates() -> None:
    """The operator creates a job's Lease at its floor and the first owner takes floor + 1; a
    replica that creates it first started at 0. A job deleted during that first term left no
    tombstone (its last token was 0), and its Lease made again handed out token 0 a second
    time (e2e `test_2_two_jobs_deleted_together...`)."""
    decision = step(None, job=True)  # no token on record: floor 0
    assert isinstance(decision, Acquire)
    assert decision.create
    assert decision.record.transitions == 1
