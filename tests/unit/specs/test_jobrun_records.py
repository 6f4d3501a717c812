"""JobRun records: names derived from the tick or term, labels and owner, the create and
finish dicts, message truncation, and reading them back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from leasecron.models.names import jobrun_name, term_jobrun_name
from leasecron.models.specs import JobRun, Outcome, job_label_value

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
START = TICK + timedelta(milliseconds=12)


def tick_run() -> JobRun:
    return JobRun.for_tick(
        job="send-invoices",
        tick=TICK,
        holder="api-7d9f-x2k4",
        start=START,
        fencing_token=41,
        namespace="billing",
    )


def test_a_tick_run_is_named_after_the_job_and_the_tick() -> None:
    run = tick_run()
    assert run.name == jobrun_name("send-invoices", TICK) == "send-invoices-20260301020000"


def test_a_term_run_is_named_after_the_fencing_token() -> None:
    run = JobRun.for_term(job="queue-poller", fencing_token=7, holder="api-1", start=START)
    assert run.name == term_jobrun_name("queue-poller", 7)
    assert run.spec.tick is None


def test_the_create_dict_carries_spec_status_label_and_owner() -> None:
    obj = tick_run().to_resource(job_uid="uid-123")
    assert obj["apiVersion"] == "leasecron.dev/v1alpha1"
    assert obj["kind"] == "JobRun"
    metadata = obj["metadata"]
    assert metadata["name"] == "send-invoices-20260301020000"
    assert metadata["namespace"] == "billing"
    assert metadata["labels"]["leasecron.dev/job"] == "send-invoices"
    (owner,) = metadata["ownerReferences"]
    assert owner == {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "name": "send-invoices",
        "uid": "uid-123",
        "controller": True,
    }
    assert obj["spec"] == {
        "job": "send-invoices",
        "tick": "2026-03-01T02:00:00Z",
        "holder": "api-7d9f-x2k4",
        "fencingToken": 41,
        "start": "2026-03-01T02:00:00.012000Z",
    }
    assert obj["status"] == {"outcome": "Running", "message": ""}


def test_without_a_job_uid_there_is_no_owner_reference() -> None:
    assert "ownerReferences" not in tick_run().to_resource()["metadata"]


def test_finishing_records_outcome_end_message_and_duration() -> None:
    end = START + timedelta(seconds=1, microseconds=234_567)
    done = tick_run().finish(outcome=Outcome.FAILED, end=end, message="boom")
    assert done.status_patch() == {
        "status": {
            "outcome": "Failed",
            "end": "2026-03-01T02:00:01.246567Z",
            "message": "boom",
            "duration": "1.235s",
        }
    }
    assert done.spec == tick_run().spec


def test_long_messages_are_truncated_to_1024_characters() -> None:
    done = tick_run().finish(outcome=Outcome.FAILED, end=START, message="x" * 5000)
    assert len(done.status.message) == 1024
    assert done.status.message.endswith("...")
    short = tick_run().finish(outcome=Outcome.FAILED, end=START, message="y" * 1024)
    assert short.status.message == "y" * 1024


def test_a_missed_tick_can_be_recorded_without_a_start() -> None:
    missed = JobRun.for_tick(
        job="send-invoices", tick=TICK, holder="", start=None, outcome=Outcome.MISSED
    )
    obj = missed.to_resource()
    assert "start" not in obj["spec"]
    assert obj["status"]["outcome"] == "Missed"


def test_the_dict_reads_back_into_an_equal_record() -> None:
    done = tick_run().finish(outcome=Outcome.SUCCEEDED, end=START + timedelta(seconds=3))
    assert JobRun.from_resource(done.to_resource(job_uid="u")) == done


def test_reading_ignores_fields_added_by_the_api_server() -> None:
    obj = tick_run().to_resource()
    obj["metadata"]["resourceVersion"] = "12"
    obj["status"]["someday"] = "new field"
    assert JobRun.from_resource(obj) == tick_run()


def test_ticks_must_be_aware_whole_seconds() -> None:
    with pytest.raises(ValidationError, match="whole second"):
        JobRun.for_tick(job="j", tick=TICK + timedelta(milliseconds=5), holder="h", start=None)
    with pytest.raises(ValidationError, match="time zone offset"):
        JobRun.for_tick(job="j", tick=datetime(2026, 1, 1), holder="h", start=None)


def test_long_job_names_get_a_label_value_within_63_characters() -> None:
    long_name = "a" * 100
    value = job_label_value(long_name)
    assert len(value) <= 63
    assert value != job_label_value("a" * 101)
    assert job_label_value("send-invoices") == "send-invoices"


@pytest.mark.parametrize("outcome", list(Outcome))
def test_only_pending_and_running_are_unfinished_and_only_succeeded_counts_as_success(
    outcome: Outcome,
) -> None:
    assert outcome.finished is (outcome not in (Outcome.PENDING, Outcome.RUNNING))
    assert outcome.succeeded is (outcome is Outcome.SUCCEEDED)
