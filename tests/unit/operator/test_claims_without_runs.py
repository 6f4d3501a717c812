"""A claim is not a run: a tick whose claim landed but that nobody ran is alarmed once its
run record had every chance to arrive, and a record that arrives late but within the grace
raises nothing. Simulated seconds on a fake clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from operator_builders import SHARD_LEASE, START, clock, facts, lease, run, snapshot

from leasecron.models.clocks import FakeClock
from leasecron.operator import _conditions as c
from leasecron.operator._missed import Expectation, Memory, expect, initial_memory
from leasecron.operator._observed import RunView
from leasecron.operator._plan import plan_job

GRACE = timedelta(seconds=10)
DUE = START - timedelta(seconds=4)  # latest @every 2s tick at or before now - 3s - 1s


def memory_for(*, checked_through: datetime | None = None, **kwargs: object) -> Memory:
    """The memory of a job created an hour ago: fresh (as after a restart), or with the
    ticks through `checked_through` already judged (steady state)."""
    job = facts(**kwargs)  # type: ignore[arg-type]
    fresh = initial_memory(job, previous={}, now=START, now_mono=5000.0, observed_generation=1)
    return replace(fresh, checked_through=checked_through)


def steady(**kwargs: object) -> Memory:
    """Every tick before DUE judged already."""
    return memory_for(checked_through=DUE - timedelta(seconds=2), **kwargs)


def judge(
    at: FakeClock,
    memory: Memory,
    *,
    claimed_through: datetime | None,
    runs: tuple[RunView, ...] = (),
    previous: dict[str, c.Condition] | None = None,
    **job: object,
) -> Expectation:
    claim = None
    if claimed_through is not None:
        claim = lease(tick=claimed_through, observed_at=at.monotonic())
    return expect(
        facts(**job),  # type: ignore[arg-type]
        snapshot(at, shard=claim, runs=runs),
        memory,
        previous or {},
        record_grace=GRACE,
    )


def runs_of_every_tick_but(skipped: datetime, upto: datetime) -> tuple[RunView, ...]:
    """Succeeded runs of every @every 2s tick from a minute before `skipped` to `upto`."""
    tick, found = skipped - timedelta(seconds=60), []
    while tick <= upto:
        if tick != skipped:
            found.append(run(tick, "Succeeded"))
        tick += timedelta(seconds=2)
    return tuple(found)


def test_a_claimed_tick_without_a_run_is_not_alarmed_within_the_grace() -> None:
    at = clock()
    result = judge(at, steady(), claimed_through=DUE)
    assert result.new_missed == ()
    assert result.memory.pending == (DUE,)
    assert (result.condition.status, result.condition.reason) == (
        c.TRUE,
        c.REASON_AWAITING_RUN_RECORD,
    )


def test_a_claimed_tick_whose_run_never_appears_is_missed_once_the_grace_is_over() -> None:
    at = clock()
    first = judge(at, steady(), claimed_through=DUE)
    at.advance(GRACE.total_seconds() - 1.5)  # the grace runs out at DUE + 3s + 10s
    runs = runs_of_every_tick_but(DUE, at.now())
    still = judge(at, first.memory, claimed_through=at.now(), runs=runs)
    assert still.new_missed == ()
    assert DUE in still.memory.pending
    at.advance(0.5)
    result = judge(at, still.memory, claimed_through=at.now(), runs=runs)
    assert result.new_missed == (DUE,)
    assert result.unrun_claims == frozenset({DUE})
    assert result.memory.pending == ()
    assert result.condition.reason == c.REASON_ON_SCHEDULE  # the latest due tick ran


def test_a_claimed_latest_due_tick_without_a_run_turns_on_schedule_false() -> None:
    at = clock()
    due = START - timedelta(minutes=1)  # @every 60s: judged at 12:00:04, grace over at 11:59:13
    memory = memory_for(checked_through=due - timedelta(minutes=1), schedule="@every 60s")
    result = judge(at, memory, claimed_through=due, schedule="@every 60s")
    assert result.due == due
    assert result.new_missed == (due,)
    assert result.unrun_claims == frozenset({due})
    assert (result.condition.status, result.condition.reason) == (c.FALSE, c.REASON_MISSED_RUN)
    message = result.condition.message
    assert f"was claimed on shard Lease {SHARD_LEASE} but no run record appeared" in message
    assert "startingDeadline 3s and the run-record grace 10s" in message


def test_an_unclaimed_tick_is_alarmed_as_never_claimed_not_as_claimed_without_a_record() -> None:
    at = clock()
    result = judge(at, steady(), claimed_through=DUE - timedelta(seconds=2))
    assert result.new_missed == (DUE,)
    assert result.unrun_claims == frozenset()
    assert "no replica of group billing-api claimed it on shard Lease" in result.condition.message
    assert "claimed on shard Lease" not in result.condition.message


def test_a_run_record_that_arrives_late_but_within_the_grace_raises_nothing() -> None:
    at = clock()
    first = judge(at, steady(), claimed_through=DUE)
    assert first.memory.pending == (DUE,)
    at.advance(GRACE.total_seconds() - 2)
    runs = (*runs_of_every_tick_but(DUE, at.now()), run(DUE, "Running"))
    result = judge(at, first.memory, claimed_through=at.now(), runs=runs)
    assert result.new_missed == ()
    assert result.memory.pending == ()
    at.advance(60)
    runs = runs_of_every_tick_but(START - timedelta(days=1), at.now())
    assert judge(at, result.memory, claimed_through=at.now(), runs=runs).new_missed == ()


def test_any_outcome_but_missed_counts_as_a_run() -> None:
    for outcome in ("Running", "Succeeded", "Failed", "LostLock", "Unguarded", "Abandoned", ""):
        at = clock()
        result = judge(at, steady(), claimed_through=DUE, runs=(run(DUE, outcome),))
        assert result.new_missed == ()
        assert result.memory.pending == ()
        assert result.condition.reason == c.REASON_ON_SCHEDULE, outcome


def test_an_unclaimed_tick_is_still_missed_right_after_its_deadline() -> None:
    at = clock()
    result = judge(at, steady(), claimed_through=DUE - timedelta(seconds=2))
    assert result.new_missed == (DUE,)
    assert result.unrun_claims == frozenset()
    assert "no replica of group billing-api claimed it" in result.condition.message


def test_a_pending_tick_is_remembered_however_many_ticks_follow_it() -> None:
    at = clock()
    memory = judge(at, steady(), claimed_through=DUE).memory
    missed: tuple[datetime, ...] = ()
    for _ in range(int(GRACE.total_seconds())):  # one pass a second: five newer ticks
        at.advance(1)
        runs = runs_of_every_tick_but(DUE, at.now())
        result = judge(at, memory, claimed_through=at.now(), runs=runs)
        memory, missed = result.memory, missed + result.new_missed
    assert missed == (DUE,)


def test_a_tick_at_or_before_the_group_records_floor_counts_as_claimed_and_waits() -> None:
    at = clock()  # the group's shard count changed: the old shard Leases claimed DUE
    job = facts()
    view = snapshot(at, shard=lease(tick=None, observed_at=at.monotonic()), floor_tick=DUE)
    result = expect(job, view, steady(), {}, record_grace=GRACE)
    assert result.new_missed == ()
    assert result.memory.pending == (DUE,)
    at.advance(GRACE.total_seconds())
    view = snapshot(at, shard=lease(tick=None, observed_at=at.monotonic()), floor_tick=DUE)
    later = expect(job, view, result.memory, {}, record_grace=GRACE)
    assert DUE in later.new_missed
    assert DUE in later.unrun_claims


def test_while_the_latest_tick_awaits_its_record_the_condition_keeps_what_it_said() -> None:
    at = clock()
    missed = c.Condition(
        type=c.ON_SCHEDULE, status=c.FALSE, reason=c.REASON_MISSED_RUN, message="earlier"
    )
    result = judge(at, steady(), claimed_through=DUE, previous={c.ON_SCHEDULE: missed})
    assert (result.condition.status, result.condition.message) == (c.FALSE, "earlier")


def test_after_a_restart_claimed_ticks_without_runs_in_the_horizon_are_judged() -> None:
    at = clock()
    pending, overdue = DUE - timedelta(seconds=8), DUE - timedelta(seconds=10)
    runs = tuple(r for r in runs_of_every_tick_but(pending, START) if r.tick != overdue)
    result = judge(at, memory_for(), claimed_through=START, runs=runs)
    assert result.memory.pending == (pending,)  # its grace runs until START + 1s
    assert result.new_missed == (overdue,)


def test_after_a_restart_older_unclaimed_ticks_are_not_recorded_again() -> None:
    at = clock()
    result = judge(at, memory_for(), claimed_through=None)
    assert result.new_missed == (DUE,)


def test_runs_whose_tick_may_still_be_judged_are_not_pruned() -> None:
    at = clock()
    job = facts(history={"succeeded": 1, "failed": 1})
    runs = tuple(run(START - timedelta(seconds=2 * i), "Succeeded") for i in range(20))
    view = snapshot(at, shard=lease(tick=START, observed_at=at.monotonic()), runs=runs)
    plan = plan_job(job, view, memory_for(), previous={}, record_grace=GRACE)
    horizon = START - timedelta(seconds=3 + 1) - GRACE
    assert plan.history.prune
    assert all(r.tick is not None and r.tick <= horizon for r in plan.history.prune)
    assert len(plan.history.prune) == len([r for r in runs if r.tick and r.tick <= horizon])


def test_the_recheck_comes_when_a_pending_tick_runs_out_of_grace() -> None:
    at = clock()
    job = facts(schedule="@every 1h")
    due = START - timedelta(hours=1)  # judged again at START + 4s, when 12:00 is due
    memory = memory_for(checked_through=due, schedule="@every 1h")
    memory = replace(memory, pending=(due,))
    view = snapshot(at, shard=lease(tick=due, observed_at=at.monotonic()))
    plan = plan_job(job, view, memory, previous={}, record_grace=timedelta(hours=1))
    assert plan.expectation.memory.pending == (due,)
    assert plan.recheck_at == at.monotonic() + 3  # due + 3s + 1h


def test_a_missed_tick_a_replica_recorded_is_alarmed_once_without_a_second_record() -> None:
    at = clock()
    recorded = run(DUE, "Missed", holder="replica-a")
    result = judge(at, steady(), claimed_through=DUE, runs=(recorded,))
    assert result.new_missed == ()  # the record exists: nothing to write
    assert result.recorded_elsewhere == (DUE,)  # but the alarm is raised
    assert (result.condition.status, result.condition.reason) == (c.FALSE, c.REASON_MISSED_RUN)
    again = judge(at, result.memory, claimed_through=DUE, runs=(recorded,))
    assert again.recorded_elsewhere == ()  # once


def test_the_operators_own_missed_records_and_those_before_a_restart_are_not_alarmed_again() -> (
    None
):
    at = clock()
    own = run(DUE, "Missed", holder="")
    assert judge(at, steady(), claimed_through=DUE, runs=(own,)).recorded_elsewhere == ()
    by_replica = run(DUE, "Missed", holder="replica-a")
    fresh = memory_for()  # after a restart or failover: judged before, maybe alarmed then
    assert judge(at, fresh, claimed_through=DUE, runs=(by_replica,)).recorded_elsewhere == ()
