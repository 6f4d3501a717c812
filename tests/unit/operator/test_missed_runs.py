"""Missed-run judgement: which ticks are missed, when OnSchedule turns False and back, and
what single-owner and every-replica jobs report instead."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from operator_builders import START, clock, facts, lease, member, run, snapshot

from leasecron.operator import _conditions as c
from leasecron.operator._missed import JUDGE_GRACE, Memory, expect, initial_memory

NO_GRACE = timedelta(0)


def fresh_memory(**kwargs: object) -> Memory:
    job = facts(**kwargs)  # type: ignore[arg-type]
    return initial_memory(
        job, previous={}, now=START, now_mono=5000.0, observed_generation=job.ref.generation
    )


def test_a_tick_nobody_claimed_by_its_deadline_is_missed_and_recorded() -> None:
    at = clock()
    job = facts()
    result = expect(job, snapshot(at), fresh_memory(), previous={})
    due = START - timedelta(seconds=4)  # latest @every 2s tick at or before now - 3s - 1s
    assert result.due == due
    assert result.new_missed == (due,)
    assert result.condition.status == c.FALSE
    assert result.condition.reason == c.REASON_MISSED_RUN
    assert "2026-03-01T11:59:56Z" in result.condition.message
    assert "startingDeadline 3s" in result.condition.message


def test_a_tick_with_a_jobrun_is_on_schedule_even_before_the_lease_is_seen() -> None:
    at = clock()
    due = START - timedelta(seconds=4)
    ran = (run(due, "Succeeded"),)
    result = expect(facts(), snapshot(at, runs=ran), fresh_memory(), previous={})
    assert result.new_missed == ()
    assert result.condition.status == c.TRUE


def test_a_tick_already_recorded_as_missed_is_not_recorded_again_but_stays_missed() -> None:
    at = clock()
    due = START - timedelta(seconds=4)
    recorded = (run(due, "Missed", holder=""),)
    result = expect(facts(), snapshot(at, runs=recorded), fresh_memory(), previous={})
    assert result.new_missed == ()
    assert result.condition.reason == c.REASON_MISSED_RUN


def test_every_unclaimed_tick_since_the_last_check_is_recorded_in_order() -> None:
    at = clock()
    due = START - timedelta(seconds=4)
    memory = replace(fresh_memory(), checked_through=due - timedelta(seconds=6))
    ran = (run(due - timedelta(seconds=2), "Succeeded"),)
    result = expect(facts(), snapshot(at, runs=ran), memory, previous={})
    assert result.new_missed == (due - timedelta(seconds=4), due)
    assert result.memory.checked_through == due


def test_ticks_before_the_job_was_created_are_not_expected() -> None:
    at = clock()
    job = facts(created=START - timedelta(seconds=3))
    memory = initial_memory(job, previous={}, now=START, now_mono=5000.0, observed_generation=1)
    result = expect(job, snapshot(at), memory, previous={})
    assert result.new_missed == ()
    assert (result.condition.status, result.condition.reason) == (c.TRUE, c.REASON_NO_TICK_DUE)


def test_a_suspended_job_is_never_missed() -> None:
    at = clock()
    result = expect(facts(suspend=True), snapshot(at), fresh_memory(suspend=True), previous={})
    assert result.new_missed == ()
    assert (result.condition.status, result.condition.reason) == (c.TRUE, c.REASON_SUSPENDED)


def test_a_resumed_job_expects_only_ticks_after_the_resume() -> None:
    at = clock()
    memory = fresh_memory(suspend=True)
    result = expect(facts(), snapshot(at), memory, previous={})
    assert result.new_missed == ()
    assert result.memory.since == START
    at.advance(6)
    later = expect(facts(), snapshot(at), result.memory, previous={})
    assert later.new_missed == (START + timedelta(seconds=2),)


def test_after_a_restart_a_job_shown_suspended_in_status_expects_ticks_from_now() -> None:
    job = facts()
    previous = {
        c.ON_SCHEDULE: c.Condition(
            type=c.ON_SCHEDULE, status=c.TRUE, reason=c.REASON_SUSPENDED, message="."
        )
    }
    memory = initial_memory(job, previous=previous, now=START, now_mono=1.0, observed_generation=1)
    assert memory.since == START


def test_after_a_restart_a_changed_spec_expects_ticks_from_now() -> None:
    job = facts(generation=3)
    memory = initial_memory(job, previous={}, now=START, now_mono=1.0, observed_generation=2)
    assert memory.since == START


def test_a_single_owner_job_without_owner_is_missed_after_its_deadline_and_alarmed_once() -> None:
    at = clock()
    job = facts(bucket="single-owner", schedule=None)
    memory = fresh_memory(bucket="single-owner", schedule=None)
    first = expect(job, snapshot(at), memory, previous={})
    assert (first.condition.status, first.condition.reason) == (c.TRUE, c.REASON_AWAITING_OWNER)
    at.advance((job.starting_deadline + JUDGE_GRACE).total_seconds())
    second = expect(job, snapshot(at), first.memory, previous={})
    assert (second.condition.status, second.condition.reason) == (c.FALSE, c.REASON_MISSED_RUN)
    assert second.gap_alarm
    at.advance(1)
    third = expect(job, snapshot(at), second.memory, previous={c.ON_SCHEDULE: second.condition})
    assert third.condition.status == c.FALSE
    assert not third.gap_alarm
    assert third.new_missed == ()


def test_a_single_owner_job_with_a_live_owner_is_on_schedule() -> None:
    at = clock()
    job = facts(bucket="single-owner", schedule=None)
    owned = lease(holder="replica-a", observed_at=at.monotonic())
    result = expect(job, snapshot(at, job_lease=owned), Memory(since=START), previous={})
    assert (result.condition.status, result.condition.reason) == (c.TRUE, c.REASON_OWNED)
    assert "replica-a" in result.condition.message


def test_a_single_owner_job_alarmed_before_a_restart_is_not_alarmed_again() -> None:
    at = clock()
    job = facts(bucket="single-owner", schedule=None)
    alarmed = c.Condition(
        type=c.ON_SCHEDULE, status=c.FALSE, reason=c.REASON_MISSED_RUN, message="."
    )
    previous = {c.ON_SCHEDULE: alarmed}
    memory = initial_memory(
        job, previous=previous, now=at.now(), now_mono=at.monotonic(), observed_generation=1
    )
    result = expect(job, snapshot(at), memory, previous=previous)
    assert result.condition.status == c.FALSE
    assert not result.gap_alarm


def test_every_replica_jobs_are_not_tracked() -> None:
    at = clock()
    job = facts(bucket="every-replica")
    alive = (member("replica-a", expires_at=at.monotonic() + 10),)
    result = expect(job, snapshot(at, members=alive), fresh_memory(), previous={})
    assert (result.condition.status, result.condition.reason) == (c.TRUE, c.REASON_NOT_TRACKED)
    assert result.new_missed == ()
