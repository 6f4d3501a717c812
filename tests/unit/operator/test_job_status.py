"""The status of one job: Valid/Ready/OnSchedule conditions with their reasons and messages,
the mirrored fields, and patches sent only when something changed."""

from __future__ import annotations

from datetime import timedelta

from operator_builders import START, clock, facts, invalid, lease, member, run, snapshot, window

from leasecron.operator import _conditions as c
from leasecron.operator._jobstatus import (
    coverage,
    desired_status,
    invalid_status,
    status_patch,
)


def on_time() -> c.Condition:
    return c.Condition(type=c.ON_SCHEDULE, status=c.TRUE, reason=c.REASON_ON_SCHEDULE, message=".")


def conditions(status: dict) -> dict[str, c.Condition]:  # type: ignore[type-arg]
    return c.conditions_by_type(status["conditions"])


def test_a_bad_cron_expression_is_invalid_schedule_naming_the_field_and_value() -> None:
    bad = invalid(schedule="61 * * * *")
    assert bad.reason == c.REASON_INVALID_SCHEDULE
    assert "spec.schedule" in bad.message
    assert "'61 * * * *'" in bad.message
    assert "minute" in bad.message


def test_an_unknown_time_zone_is_invalid_time_zone_naming_the_field_and_value() -> None:
    bad = invalid(timeZone="Mars/Olympus_Mons")
    assert bad.reason == c.REASON_INVALID_TIME_ZONE
    assert "spec.timeZone" in bad.message
    assert "Mars/Olympus_Mons" in bad.message


def test_other_problems_are_invalid_spec_and_all_of_them_are_listed() -> None:
    bad = invalid(startingDeadline="forever", jitter="soon")
    assert bad.reason == c.REASON_INVALID_SPEC
    assert "spec.startingDeadline" in bad.message
    assert "spec.jitter" in bad.message


def test_an_invalid_job_is_neither_ready_nor_judged_and_keeps_its_other_fields() -> None:
    bad = invalid(schedule="every tuesday")
    status = invalid_status(invalid=bad, previous={"missedRuns": 4}, now=START)
    found = conditions(status)
    assert (found[c.VALID].status, found[c.VALID].reason) == (c.FALSE, c.REASON_INVALID_SCHEDULE)
    assert (found[c.READY].status, found[c.READY].reason) == (c.FALSE, c.REASON_SPEC_NOT_VALID)
    assert found[c.ON_SCHEDULE].status == c.UNKNOWN
    assert status["missedRuns"] == 4
    assert status["observedGeneration"] == 1


def test_a_group_without_live_replicas_is_not_ready_with_reason_no_replicas() -> None:
    at = clock()
    dead = (member("replica-a", expires_at=at.monotonic() - 1),)
    ready, replicas = coverage(facts(), snapshot(at, members=dead))
    assert (ready.status, ready.reason, replicas) == (c.FALSE, c.REASON_NO_REPLICAS, 0)
    assert "no live replica of group billing-api" in ready.message.lower()


def test_a_handler_no_live_replica_registered_is_not_ready_and_named() -> None:
    at = clock()
    others = (member("replica-a", handlers=("other",), expires_at=at.monotonic() + 5),)
    ready, replicas = coverage(facts(), snapshot(at, members=others))
    assert (ready.status, ready.reason, replicas) == (
        c.FALSE,
        c.REASON_HANDLER_NOT_REGISTERED,
        0,
    )
    assert (
        "no live replica of group billing-api has registered handler nightly_report"
        in ready.message.lower()
    )


def test_live_replicas_that_registered_the_handler_make_the_job_ready_and_are_counted() -> None:
    at = clock()
    alive = (
        member("replica-a", expires_at=at.monotonic() + 5),
        member("replica-b", expires_at=at.monotonic() + 5),
        member("replica-c", handlers=("other",), expires_at=at.monotonic() + 5),
    )
    ready, replicas = coverage(facts(), snapshot(at, members=alive))
    assert (ready.status, replicas) == (c.TRUE, 2)


def test_status_mirrors_holder_last_run_and_schedule_times() -> None:
    at = clock()
    tick = START - timedelta(seconds=2)
    grant = lease(holder="replica-a", tick=tick, transitions=7, observed_at=at.monotonic())
    runs = (
        run(tick - timedelta(seconds=2), "Succeeded", end="2026-03-01T11:59:57Z"),
        run(tick, "Running", token=7),
    )
    status = desired_status(
        facts=facts(),
        snapshot=snapshot(at, shard=grant, runs=runs),
        previous={},
        on_schedule=on_time(),
        missed_runs=2,
        ticks=window(facts(), at),
    )
    assert status["holder"] == "replica-a"
    assert status["lastRun"] == {
        "tick": "2026-03-01T11:59:58Z",
        "holder": "replica-a",
        "start": "2026-03-01T11:59:58Z",
        "outcome": "Running",
        "fencingToken": 7,
    }
    assert status["lastScheduleTime"] == "2026-03-01T11:59:58Z"
    assert status["nextScheduleTime"] == "2026-03-01T12:00:02Z"
    assert status["lastSuccessfulTime"] == "2026-03-01T11:59:57Z"
    assert status["missedRuns"] == 2


def test_the_holder_is_empty_once_the_grant_expired_by_the_operators_clock() -> None:
    at = clock()
    grant = lease(holder="replica-a", duration=5, observed_at=at.monotonic())
    at.advance(5)
    status = desired_status(
        facts=facts(),
        snapshot=snapshot(at, shard=grant),
        previous={},
        on_schedule=on_time(),
        missed_runs=0,
        ticks=window(facts(), at),
    )
    assert status["holder"] == ""


def test_a_suspended_job_has_no_next_schedule_time() -> None:
    at = clock()
    status = desired_status(
        facts=facts(suspend=True),
        snapshot=snapshot(at),
        previous={},
        on_schedule=on_time(),
        missed_runs=0,
        ticks=window(facts(), at),
    )
    assert status["nextScheduleTime"] is None


def test_last_successful_time_never_moves_back_when_history_is_pruned() -> None:
    at = clock()
    status = desired_status(
        facts=facts(),
        snapshot=snapshot(at),
        previous={"lastSuccessfulTime": "2026-03-01T11:00:00Z"},
        on_schedule=on_time(),
        missed_runs=0,
        ticks=window(facts(), at),
    )
    assert status["lastSuccessfulTime"] == "2026-03-01T11:00:00Z"


def test_an_unchanged_status_needs_no_patch_and_keeps_transition_times() -> None:
    at = clock()
    view = snapshot(at, members=(member("replica-a", expires_at=at.monotonic() + 60),))
    first = desired_status(
        facts=facts(),
        snapshot=view,
        previous={},
        on_schedule=on_time(),
        missed_runs=0,
        ticks=window(facts(), at),
    )
    at.advance(0.5)  # same tick window: nothing about the job changed
    later = snapshot(at, members=view.members)
    second = desired_status(
        facts=facts(),
        snapshot=later,
        previous=first,
        on_schedule=on_time(),
        missed_runs=0,
        ticks=window(facts(), at),
    )
    assert status_patch(first, second) is None


def test_last_transition_time_moves_only_when_the_status_changes() -> None:
    at = clock()
    missed = c.Condition(
        type=c.ON_SCHEDULE, status=c.FALSE, reason=c.REASON_MISSED_RUN, message="a"
    )
    first = desired_status(
        facts=facts(),
        snapshot=snapshot(at),
        previous={},
        on_schedule=missed,
        missed_runs=1,
        ticks=window(facts(), at),
    )
    at.advance(60)
    reworded = c.Condition(
        type=c.ON_SCHEDULE, status=c.FALSE, reason=c.REASON_MISSED_RUN, message="b"
    )
    second = desired_status(
        facts=facts(),
        snapshot=snapshot(at),
        previous=first,
        on_schedule=reworded,
        missed_runs=2,
        ticks=window(facts(), at),
    )
    assert conditions(second)[c.ON_SCHEDULE].last_transition_time == "2026-03-01T12:00:00Z"
    at.advance(60)
    third = desired_status(
        facts=facts(),
        snapshot=snapshot(at),
        previous=second,
        on_schedule=on_time(),
        missed_runs=2,
        ticks=window(facts(), at),
    )
    assert conditions(third)[c.ON_SCHEDULE].last_transition_time == "2026-03-01T12:02:00Z"
    assert conditions(third)[c.VALID].last_transition_time == "2026-03-01T12:00:00Z"


def test_a_patch_removes_nested_fields_the_new_last_run_does_not_have() -> None:
    current = {"lastRun": {"tick": "a", "end": "b", "outcome": "Succeeded"}}
    desired = {"lastRun": {"tick": "c", "outcome": "Running"}}
    assert status_patch(current, desired) == {
        "lastRun": {"end": None, "tick": "c", "outcome": "Running"}
    }


def test_an_election_margin_under_one_second_is_invalid_spec_naming_the_field() -> None:
    bad = invalid(election={"leaseDuration": "3s", "renewDeadline": "2500ms"})
    status = invalid_status(invalid=bad, previous={}, now=START)
    valid = conditions(status)[c.VALID]
    assert (valid.status, valid.reason) == (c.FALSE, c.REASON_INVALID_SPEC)
    assert "spec.election.renewDeadline: '2500ms'" in valid.message
    assert "spec.election.leaseDuration ('3s')" in valid.message
    assert "client-go" in valid.message


def test_a_stored_job_that_still_sets_the_removed_coordination_is_invalid_removed_field() -> None:
    found = invalid(coordination="Leader")
    assert found.reason == c.REASON_REMOVED_FIELD
    assert "spec.coordination: 'Leader' was removed: every once-per-tick job is claimed" in (
        found.message
    )
    status = invalid_status(invalid=found, previous={}, now=START)
    valid = next(x for x in status["conditions"] if x["type"] == c.VALID)
    assert (valid["status"], valid["reason"]) == ("False", "RemovedField")


def test_the_shard_leases_high_water_mark_is_the_last_schedule_time_only_when_it_is_a_tick() -> (
    None
):
    at = clock()
    for mark, expected in ((START, "2026-03-01T12:00:00Z"), (START - timedelta(seconds=1), None)):
        status = desired_status(
            facts=facts(),
            snapshot=snapshot(at, shard=lease(holder="replica-a", tick=mark, observed_at=0)),
            previous={},
            on_schedule=on_time(),
            missed_runs=0,
            ticks=window(facts(), at),
        )
        assert status["lastScheduleTime"] == expected
