"""Claim, keep-alive and release decisions (docs/design.md §5.4, §5.5), on simulated seconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leasecron.models.configs import LockConfig
from leasecron.models.decisions import (
    Claim,
    Lost,
    Observation,
    Release,
    Skip,
    Write,
    decide_claim,
    decide_release,
    decide_renew,
)
from leasecron.models.leases import LeaseRecord

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TICK = NOW
CONFIG = LockConfig(at_most_for=10, at_least_for=4)


def claim(
    current: Observation | None,
    *,
    now_mono: float = 100.0,
    now_wall: datetime = NOW,
    tick: datetime = TICK,
    deadline: timedelta | None = None,
) -> Skip | Claim:
    return decide_claim(
        current=current,
        tick=tick,
        identity="me",
        config=CONFIG,
        now_mono=now_mono,
        now_wall=now_wall,
        name="l",
        namespace="ns",
        starting_deadline=deadline,
    )


def seen(record: LeaseRecord, at: float = 100.0) -> Observation:
    return Observation(record=record, observed_at=at)


def held(holder: str = "other", **changes: object) -> LeaseRecord:
    fields: dict[str, object] = {
        "name": "l",
        "namespace": "ns",
        "holder": holder,
        "lease_duration_s": 10,
        "transitions": 5,
        "tick": TICK - timedelta(minutes=1),
        "resource_version": "9",
    }
    fields.update(changes)
    return LeaseRecord(**fields)  # type: ignore[arg-type]


def test_without_a_lease_the_claim_creates_it_with_token_one() -> None:
    decision = claim(None)
    assert isinstance(decision, Claim)
    assert decision.create
    assert decision.token == 1
    assert decision.record.holder == "me"
    assert decision.record.tick == TICK
    assert decision.record.lease_duration_s == 10
    assert decision.record.acquire_time == decision.record.renew_time == NOW


def test_a_free_lease_is_claimed_conditionally_with_the_next_token() -> None:
    decision = claim(seen(held(holder="")))
    assert isinstance(decision, Claim)
    assert not decision.create
    assert decision.record.resource_version == "9"
    assert decision.token == 6


def test_a_lease_that_records_this_tick_or_a_later_one_is_taken() -> None:
    assert claim(seen(held(holder="", tick=TICK))) == Skip("taken")
    assert claim(seen(held(holder="", tick=TICK + timedelta(minutes=1)))) == Skip("taken")


def test_a_replica_whose_clock_is_three_seconds_late_skips_the_tick_already_recorded() -> None:
    late = NOW - timedelta(seconds=3)
    # The late replica computes the same tick (or an earlier one) and sees it recorded.
    assert claim(seen(held(holder="", tick=TICK)), now_wall=late, tick=TICK) == Skip("taken")
    earlier = TICK - timedelta(seconds=5)
    assert claim(seen(held(holder="", tick=TICK)), now_wall=late, tick=earlier) == Skip("taken")


def test_a_live_grant_is_never_overlapped_even_by_its_own_holder() -> None:
    assert claim(seen(held(), at=95.0), now_mono=100.0) == Skip("live_grant")
    assert claim(seen(held(holder="me"), at=95.0), now_mono=100.0) == Skip("live_grant")


def test_expiry_is_measured_from_when_this_replica_observed_the_record() -> None:
    # The remote renewTime is an hour old, but we saw this version only 9.9 s ago: still live.
    stale_looking = held(renew_time=NOW - timedelta(hours=1))
    assert claim(seen(stale_looking, at=90.1), now_mono=100.0) == Skip("live_grant")
    decision = claim(seen(stale_looking, at=90.0), now_mono=100.0)
    assert isinstance(decision, Claim)
    assert (decision.record.holder, decision.token, decision.create) == ("me", 6, False)


def test_an_unknown_duration_counts_as_live_for_our_own_at_most_for() -> None:
    corrupt = held(lease_duration_s=None, problems=("leaseDurationSeconds -5 ...",))
    assert claim(seen(corrupt, at=91.0), now_mono=100.0) == Skip("live_grant")
    decision = claim(seen(corrupt, at=90.0), now_mono=100.0)
    assert isinstance(decision, Claim)
    assert decision.record.problems == ()
    assert (decision.record.holder, decision.record.lease_duration_s) == ("me", 10)
    assert (decision.token, decision.record.resource_version) == (6, "9")


def test_past_the_starting_deadline_nobody_starts_the_tick() -> None:
    late_wall = TICK + timedelta(seconds=61)
    assert claim(None, now_wall=late_wall, deadline=timedelta(seconds=60)) == Skip("deadline")
    decision = claim(None, now_wall=late_wall, deadline=timedelta(seconds=62))
    assert isinstance(decision, Claim)
    assert (decision.record.tick, decision.record.acquire_time) == (TICK, late_wall)


def test_exactly_at_the_starting_deadline_the_tick_still_starts() -> None:
    # docs/design.md §5.4 step 2: nobody starts a tick past tick + startingDeadline; at the deadline
    # itself it still starts (as a CronJob's startingDeadlineSeconds), one microsecond later not.
    deadline = timedelta(seconds=60)
    at_deadline = claim(None, now_wall=TICK + deadline, deadline=deadline)
    assert isinstance(at_deadline, Claim)
    assert at_deadline.record.tick == TICK
    just_past = TICK + deadline + timedelta(microseconds=1)
    assert claim(None, now_wall=just_past, deadline=deadline) == Skip("deadline")
    assert isinstance(claim(None, now_wall=TICK, deadline=timedelta(0)), Claim)


def test_a_taken_tick_is_reported_as_taken_rather_than_past_deadline() -> None:
    record = held(holder="", tick=TICK)
    late_wall = TICK + timedelta(hours=1)
    assert claim(seen(record), now_wall=late_wall, deadline=timedelta(0)) == Skip("taken")


def test_a_tick_recorded_absurdly_far_in_the_future_does_not_block_the_job() -> None:
    corrupt = held(holder="", tick=NOW + timedelta(days=400))
    decision = claim(seen(corrupt))
    assert isinstance(decision, Claim)
    assert (decision.record.tick, decision.token, decision.record.holder) == (TICK, 6, "me")


def test_a_recorded_tick_up_to_a_day_ahead_still_counts_as_taken() -> None:
    # A replica whose clock runs hours ahead is still sane: its recorded tick blocks ours.
    ahead = held(holder="", tick=NOW + timedelta(hours=23))
    assert claim(seen(ahead)) == Skip("taken")


def grant(**changes: object) -> LeaseRecord:
    fields: dict[str, object] = {"holder": "me", "transitions": 6, "tick": TICK}
    return held(**{**fields, **changes})  # type: ignore[arg-type]


def test_renew_keeps_holder_token_and_tick_and_moves_renew_time() -> None:
    later = NOW + timedelta(seconds=3)
    decision = decide_renew(current=grant(), identity="me", token=6, config=CONFIG, now_wall=later)
    assert isinstance(decision, Write)
    assert decision.record.renew_time == later
    assert (decision.record.holder, decision.record.transitions) == ("me", 6)
    assert decision.record.tick == TICK
    assert decision.record.resource_version == "9"


def test_renew_after_someone_else_took_over_is_lost_and_writes_nothing() -> None:
    current = held(holder="other", transitions=7)
    decision = decide_renew(current=current, identity="me", token=6, config=CONFIG, now_wall=NOW)
    assert decision == Lost("the Lease is held by other now")


def test_renew_when_the_token_moved_on_is_lost() -> None:
    decision = decide_renew(
        current=grant(transitions=8), identity="me", token=6, config=CONFIG, now_wall=NOW
    )
    assert decision == Lost("the Lease shows token 8, not 6")


def release(current: LeaseRecord, *, acquired: float, now: float) -> Release | Lost:
    return decide_release(
        current=current,
        identity="me",
        token=6,
        config=CONFIG,
        acquired_mono=acquired,
        now_mono=now,
        now_wall=NOW,
    )


def test_release_after_at_least_for_frees_the_lease_like_client_go() -> None:
    decision = release(grant(), acquired=100.0, now=104.0)
    assert isinstance(decision, Release)
    assert decision.free_at is None
    record = decision.record
    assert (record.holder, record.lease_duration_s) == ("", 1)
    assert record.transitions == 6
    assert record.tick == TICK
    assert record.acquire_time == record.renew_time == NOW


def test_release_within_at_least_for_holds_the_lease_for_the_rest_of_it() -> None:
    decision = release(grant(), acquired=100.0, now=101.5)
    assert isinstance(decision, Release)
    assert decision.free_at == 104.0
    assert decision.record.holder == "me"
    assert decision.record.lease_duration_s == 3  # 2.5 s rounded up
    # Held, the record still shows this tick and token: nobody may claim the tick again.
    assert (decision.record.tick, decision.record.transitions) == (TICK, 6)
    assert decision.record.renew_time == NOW


def test_release_of_a_grant_already_lost_writes_nothing() -> None:
    lost = release(held(holder="", transitions=6), acquired=100, now=200)
    assert lost == Lost("the Lease is held by nobody now")
