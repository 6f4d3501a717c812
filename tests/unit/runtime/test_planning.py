"""Tick planning (docs/design.md §5.6) on simulated time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leasecron.models.clocks import FakeClock
from leasecron.models.schedules import Schedule
from leasecron.models.specs import CatchUpPolicy
from leasecron.models.vocabulary import SkipReason
from leasecron.runtime._planning import (
    TickPlan,
    due_order,
    jitter_delay,
    next_tick,
    plan_claimed,
    plan_overtaken,
)

START = datetime(2026, 1, 1, 5, 30, tzinfo=UTC)
HOURLY = Schedule.parse("@hourly")
DEADLINE = timedelta(seconds=60)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, hour, minute, second, tzinfo=UTC)


def test_the_next_tick_is_the_first_after_the_last_one_handled_while_it_is_ahead() -> None:
    clock = FakeClock(start=START)
    planned = next_tick(
        HOURLY,
        now=clock.now(),
        after=at(5),
        starting_deadline=DEADLINE,
        catch_up=CatchUpPolicy.NONE,
    )
    assert planned.tick == at(6) and not planned.catch_up


def test_a_tick_still_within_its_starting_deadline_starts_late() -> None:
    clock = FakeClock(start=at(5, 0, 45))
    planned = next_tick(
        HOURLY,
        now=clock.now(),
        after=at(1),
        starting_deadline=DEADLINE,
        catch_up=CatchUpPolicy.NONE,
    )
    assert planned.tick == at(5) and not planned.catch_up


def test_past_the_starting_deadline_nobody_starts_the_tick_without_catch_up() -> None:
    clock = FakeClock(start=START)
    planned = next_tick(
        HOURLY,
        now=clock.now(),
        after=at(1),
        starting_deadline=DEADLINE,
        catch_up=CatchUpPolicy.NONE,
    )
    assert planned.tick == at(6)


@pytest.mark.parametrize("policy", [CatchUpPolicy.LATEST, CatchUpPolicy.ALL])
def test_latest_and_all_run_the_latest_missed_tick_as_a_catch_up(policy: CatchUpPolicy) -> None:
    clock = FakeClock(start=START)
    planned = next_tick(
        HOURLY, now=clock.now(), after=at(1), starting_deadline=DEADLINE, catch_up=policy
    )
    assert planned.tick == at(5) and planned.catch_up


def test_ticks_before_the_job_existed_are_never_caught_up() -> None:
    created = at(5, 10)
    clock = FakeClock(start=START)
    planned = next_tick(
        HOURLY,
        now=clock.now(),
        after=created,
        starting_deadline=DEADLINE,
        catch_up=CatchUpPolicy.ALL,
    )
    assert planned.tick == at(6) and not planned.catch_up


def test_a_replica_that_advances_past_a_tick_moves_on_to_the_next() -> None:
    every = Schedule.parse("@every 1s")
    clock = FakeClock(start=at(5))
    seen = []
    after = at(4, 59, 59)
    for _ in range(3):
        planned = next_tick(
            every, now=clock.now(), after=after, starting_deadline=None, catch_up=CatchUpPolicy.NONE
        )
        seen.append(planned.tick)
        after = planned.tick
        clock.advance(1)
    assert seen == [at(5), at(5, 0, 1), at(5, 0, 2)]


def test_none_and_latest_run_only_the_claimed_tick_and_record_the_rest_missed() -> None:
    for policy in (CatchUpPolicy.NONE, CatchUpPolicy.LATEST):
        plan = plan_claimed(
            HOURLY, claimed=at(5), previous=at(1), not_before=None, catch_up=policy, max_ticks=10
        )
        assert plan.run == (at(5),)
        assert plan.missed == (at(2), at(3), at(4))
        assert not plan.more_missed


def test_all_runs_each_missed_tick_in_order_then_the_claimed_one() -> None:
    plan = plan_claimed(
        HOURLY,
        claimed=at(5),
        previous=at(1),
        not_before=None,
        catch_up=CatchUpPolicy.ALL,
        max_ticks=10,
    )
    assert plan.run == (at(2), at(3), at(4), at(5))
    assert plan.missed == ()


def _caught_up(previous: datetime | None = None) -> TickPlan:
    """Claimed 5:00 after `previous` (1:00) with catch-up All, maxTicks 2: runs 3:00 and 4:00,
    2:00 missed."""
    return plan_claimed(
        HOURLY,
        claimed=at(5),
        previous=previous or at(1),
        not_before=None,
        catch_up=CatchUpPolicy.ALL,
        max_ticks=2,
    )


def test_an_on_time_instant_starts_before_the_catch_up_runs_planned_with_it() -> None:
    plan, overlapped, skipped = due_order(_caught_up(), late=False, waited=False, catch_up=False)
    assert (plan.run, plan.missed, overlapped) == ((at(5), at(3), at(4)), (at(2),), ())
    assert skipped is None


def test_an_instant_past_its_deadline_is_missed_and_its_catch_up_runs_still_run() -> None:
    plan, overlapped, skipped = due_order(_caught_up(), late=True, waited=False, catch_up=False)
    assert (plan.run, plan.missed, overlapped) == ((at(3), at(4)), (at(2), at(5)), ())
    assert skipped is SkipReason.DEADLINE


def test_an_instant_kept_from_starting_by_the_earlier_run_records_its_catch_up_ticks_too() -> None:
    plan, overlapped, skipped = due_order(_caught_up(), late=False, waited=True, catch_up=False)
    assert (plan.run, plan.missed, overlapped) == ((), (at(2),), (at(3), at(4), at(5)))
    assert skipped is SkipReason.OVERLAP


def test_a_catch_up_instant_runs_in_its_plans_order() -> None:
    plan, overlapped, skipped = due_order(_caught_up(), late=True, waited=False, catch_up=True)
    assert (plan.run, plan.missed, overlapped) == ((at(3), at(4), at(5)), (at(2),), ())
    assert skipped is None


def test_all_runs_at_most_max_ticks_missed_ticks_the_newest_ones() -> None:
    plan = _caught_up(previous=at(0))
    assert plan.run == (at(3), at(4), at(5))
    assert plan.missed == (at(1), at(2))


def test_missed_records_are_bounded_and_the_excess_is_flagged() -> None:
    every = Schedule.parse("@every 1s")
    plan = plan_claimed(
        every,
        claimed=at(5),
        previous=at(4),
        not_before=None,
        catch_up=CatchUpPolicy.NONE,
        max_ticks=10,
        record_limit=3,
    )
    assert plan.missed == (at(4, 59, 57), at(4, 59, 58), at(4, 59, 59))
    assert plan.more_missed


def test_a_first_claim_counts_missed_ticks_from_the_jobs_creation_only() -> None:
    plan = plan_claimed(
        HOURLY,
        claimed=at(5),
        previous=None,
        not_before=at(3, 30),
        catch_up=CatchUpPolicy.NONE,
        max_ticks=10,
    )
    assert plan.missed == (at(4),)
    fresh = plan_claimed(
        HOURLY,
        claimed=at(5),
        previous=None,
        not_before=None,
        catch_up=CatchUpPolicy.ALL,
        max_ticks=3,
    )
    assert fresh.run == (at(5),) and fresh.missed == ()


def test_the_next_consecutive_tick_has_nothing_missed() -> None:
    plan = plan_claimed(
        HOURLY,
        claimed=at(5),
        previous=at(4),
        not_before=None,
        catch_up=CatchUpPolicy.ALL,
        max_ticks=3,
    )
    assert plan.run == (at(5),) and plan.missed == ()


def test_jitter_is_within_bounds_the_same_on_every_replica_and_spread_over_ticks() -> None:
    jitter = timedelta(seconds=10)
    delays = [jitter_delay("job", at(h), jitter) for h in range(24)]
    assert all(0 <= d < 10 for d in delays)
    assert jitter_delay("job", at(3), jitter) == delays[3]
    assert len({round(d, 6) for d in delays}) > 20
    assert jitter_delay("job", at(3), timedelta(0)) == 0.0


def test_ticks_before_the_job_existed_or_was_resumed_are_never_missed() -> None:
    plan = plan_claimed(
        HOURLY,
        claimed=at(5),
        previous=at(0),
        not_before=at(3, 30),
        catch_up=CatchUpPolicy.ALL,
        max_ticks=10,
    )
    assert plan.run == (at(4), at(5)) and plan.missed == ()


def overtaken(**kw: object) -> TickPlan | None:
    args: dict[str, object] = {
        "instant": at(5, 30),
        "previous": at(1, 30),
        "not_before": None,
        "now": at(5, 30),
        "starting_deadline": timedelta(minutes=10),
        "catch_up": CatchUpPolicy.NONE,
        "max_ticks": 3,
    }
    args.update(kw)
    return plan_overtaken(HOURLY, **args)  # type: ignore[arg-type]


def test_ticks_of_a_job_not_due_at_the_claimed_instant_are_recorded_missed_without_catch_up() -> (
    None
):
    plan = overtaken()
    assert plan is not None
    assert plan.run == () and plan.missed == (at(2), at(3), at(4), at(5))
    assert plan.claimed == at(5)


def test_an_overtaken_tick_still_within_its_deadline_runs_and_catch_up_adds_the_older_ones() -> (
    None
):
    fresh = overtaken(now=at(5, 5))
    assert fresh is not None and fresh.run == (at(5),) and fresh.missed == (at(2), at(3), at(4))
    latest = overtaken(catch_up=CatchUpPolicy.LATEST)
    assert latest is not None and latest.run == (at(5),) and latest.missed == (at(2), at(3), at(4))
    every = overtaken(catch_up=CatchUpPolicy.ALL, max_ticks=2)
    assert every is not None and every.run == (at(4), at(5)) and every.missed == (at(2), at(3))


def test_no_overtaken_plan_without_ticks_in_between_or_before_the_job_existed() -> None:
    assert overtaken(previous=at(5, 1)) is None
    assert overtaken(previous=None, not_before=None) is None
    created = overtaken(previous=at(1, 30), not_before=at(4, 10))
    assert created is not None and created.missed == (at(5),)
