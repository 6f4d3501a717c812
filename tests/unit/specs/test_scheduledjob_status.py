"""The ScheduledJob status value: wire form, reading it back, and replacing conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leasecron.models.specs import (
    Condition,
    ConditionStatus,
    ConditionType,
    LastRun,
    Outcome,
    ScheduledJobStatus,
)

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def ready(status: ConditionStatus, at: datetime, reason: str = "HandlerRegistered") -> Condition:
    return Condition(
        type=ConditionType.READY,
        status=status,
        reason=reason,
        message="A live replica registered the handler.",
        observed_generation=2,
        last_transition_time=at,
    )


def test_the_status_is_written_with_camel_case_names_and_rfc3339_times() -> None:
    status = ScheduledJobStatus(
        observed_generation=2,
        conditions=(ready(ConditionStatus.TRUE, T0),),
        next_schedule_time=T0 + timedelta(hours=1),
        holder="api-1",
        last_run=LastRun(tick=T0, holder="api-1", outcome=Outcome.RUNNING, fencing_token=9),
        missed_runs=1,
        replicas=3,
    )
    wire = status.to_dict()
    assert wire["observedGeneration"] == 2
    assert wire["nextScheduleTime"] == "2026-03-01T03:00:00Z"
    assert wire["lastRun"] == {
        "tick": "2026-03-01T02:00:00Z",
        "holder": "api-1",
        "outcome": "Running",
        "fencingToken": 9,
    }
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-03-01T02:00:00Z"
    assert ScheduledJobStatus.from_resource({"status": wire}) == status


def test_an_object_without_status_reads_as_an_empty_status() -> None:
    empty = ScheduledJobStatus.from_resource({"spec": {}})
    assert (empty.holder, empty.missed_runs, empty.conditions) == ("", 0, ())


def test_a_condition_is_found_by_its_type() -> None:
    valid = Condition(
        type=ConditionType.VALID,
        status=ConditionStatus.TRUE,
        reason="Valid",
        message="The spec is valid.",
        last_transition_time=T0,
    )
    status = ScheduledJobStatus(conditions=(valid, ready(ConditionStatus.TRUE, T0)))
    assert [c.type for c in status.conditions] == ["Valid", "Ready"]
    assert status.condition("OnSchedule") is None
