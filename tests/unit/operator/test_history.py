"""JobRun history: runs whose holder vanished become Abandoned, finished runs are pruned per
outcome class to the job's history limits."""

from __future__ import annotations

from datetime import timedelta

from operator_builders import START, clock, facts, lease, member, run, snapshot

from leasecron.operator._history import abandoned_runs, plan_history, runs_to_prune


def ticks(count: int) -> list:  # type: ignore[type-arg]
    return [START - timedelta(seconds=2 * (count - i)) for i in range(count)]


def test_a_running_run_whose_holder_lost_its_grant_and_member_lease_is_abandoned() -> None:
    at = clock()
    going = run(START - timedelta(seconds=30), "Running", holder="replica-a")
    grant = lease(holder="replica-a", duration=5, observed_at=at.monotonic())
    at.advance(6)  # the grant was never renewed: expired by our own clock
    assert abandoned_runs(facts(), snapshot(at, shard=grant, runs=(going,))) == [going]


def test_a_running_run_whose_holder_still_holds_the_grant_is_not_abandoned() -> None:
    at = clock()
    going = run(START - timedelta(seconds=30), "Running", holder="replica-a")
    grant = lease(holder="replica-a", duration=15, observed_at=at.monotonic())
    at.advance(5)
    assert abandoned_runs(facts(), snapshot(at, shard=grant, runs=(going,))) == []


def test_a_running_run_whose_holder_is_still_a_live_member_is_left_to_its_holder() -> None:
    at = clock()
    going = run(START - timedelta(seconds=30), "Running", holder="replica-a")
    grant = lease(holder="replica-b", observed_at=at.monotonic())
    alive = (member("replica-a", expires_at=at.monotonic() + 10),)
    view = snapshot(at, shard=grant, runs=(going,), members=alive)
    assert abandoned_runs(facts(), view) == []


def test_a_running_run_whose_member_lease_expired_is_abandoned() -> None:
    at = clock()
    going = run(START - timedelta(seconds=30), "Running", holder="replica-a")
    dead = (member("replica-a", expires_at=at.monotonic() - 1),)
    assert abandoned_runs(facts(), snapshot(at, runs=(going,), members=dead)) == [going]


def test_finished_runs_are_pruned_per_outcome_class_oldest_first() -> None:
    stamps = ticks(8)
    runs = [
        run(stamps[0], "Succeeded"),
        run(stamps[1], "Missed"),
        run(stamps[2], "Succeeded"),
        run(stamps[3], "Abandoned"),
        run(stamps[4], "LostLock"),
        run(stamps[5], "Succeeded"),
        run(stamps[6], "Failed"),
        run(stamps[7], "Running"),
    ]
    pruned = runs_to_prune(runs, succeeded=2, failed=2)
    assert [r.tick for r in pruned] == [stamps[0], stamps[1], stamps[3]]


def test_running_runs_and_runs_without_outcome_are_never_pruned() -> None:
    stamps = ticks(3)
    runs = [run(stamps[0], "Running"), run(stamps[1], ""), run(stamps[2], "Failed")]
    assert runs_to_prune(runs, succeeded=0, failed=0) == [runs[2]]


def test_the_history_plan_uses_the_jobs_limits() -> None:
    at = clock()
    stamps = ticks(5)
    runs = tuple(run(stamp, "Succeeded") for stamp in stamps)
    job = facts(history={"succeeded": 1, "failed": 1})
    plan = plan_history(job, snapshot(at, runs=runs))
    assert [r.tick for r in plan.prune] == stamps[:4]
    assert plan.abandoned == ()
