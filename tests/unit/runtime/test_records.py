"""The recorded outcome of a run, from how its handler ended and why it was stopped."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from leasecron.kube.errors import AlreadyExists, Conflict, NotFound, OutcomeUnknown, Unavailable
from leasecron.kube.jobruns import JobRunStore
from leasecron.models.clocks import FakeClock
from leasecron.models.specs import JobRun, Outcome, validate_resource
from leasecron.runtime._invoke import HandlerEnd, StopReason
from leasecron.runtime._records import Recorder, describe_error, outcome_of
from leasecron.testing.handlers import scheduled_job

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def operator_missed(job: str) -> dict[str, Any]:
    """The `Missed` record the operator writes for TICK of `job`."""
    run = JobRun.for_tick(
        job=job,
        tick=TICK,
        holder="operator",
        start=None,
        namespace="ns",
        outcome=Outcome.MISSED,
        message="late",
    )
    return run.to_resource(job_uid=None)


def end(
    *, error: BaseException | None = None, interrupted: bool = False, abandoned: bool = False
) -> HandlerEnd:
    return HandlerEnd(error=error, interrupted=interrupted, abandoned=abandoned, duration=0.1)


def test_a_handler_that_returns_succeeded_and_an_unguarded_one_is_marked_so() -> None:
    assert outcome_of(end(), reason=None, unguarded=False, term=False) == (Outcome.SUCCEEDED, "")
    assert outcome_of(end(), reason=None, unguarded=True, term=False)[0] is Outcome.UNGUARDED


def test_a_handler_that_raises_failed_with_the_type_and_message() -> None:
    outcome, message = outcome_of(
        end(error=ValueError("bad row 7")), reason=None, unguarded=False, term=False
    )
    assert (outcome, message) == (Outcome.FAILED, "ValueError: bad row 7")
    assert describe_error(KeyError()) == "KeyError"


@pytest.mark.parametrize("term", [False, True])
def test_a_run_whose_grant_was_lost_is_lost_lock_whatever_the_handler_did(term: bool) -> None:
    outcome, message = outcome_of(
        end(interrupted=True, error=RuntimeError("write refused")),
        reason=StopReason.LOST,
        unguarded=False,
        term=term,
    )
    assert outcome is Outcome.LOST_LOCK
    assert "RuntimeError: write refused" in message


def test_a_term_stopped_for_shutdown_or_removal_succeeded_but_a_stopped_tick_did_not() -> None:
    for reason in (StopReason.STOPPING, StopReason.REMOVED):
        stopped = end(interrupted=True)
        assert outcome_of(stopped, reason=reason, unguarded=False, term=True)[0] is (
            Outcome.SUCCEEDED
        )
        outcome, message = outcome_of(stopped, reason=reason, unguarded=False, term=False)
        assert outcome is Outcome.FAILED and "stopped" in message


def test_a_handler_that_would_not_stop_within_the_grace_period_failed() -> None:
    outcome, message = outcome_of(
        end(interrupted=True, abandoned=True),
        reason=StopReason.STOPPING,
        unguarded=False,
        term=True,
    )
    assert outcome is Outcome.FAILED and "grace period" in message


class FakeJobRuns:
    """An in-memory JobRunStore: create, get and merge-patch, with resourceVersions."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.version = 0

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.items:
            raise AlreadyExists(f"{name} exists", reason="AlreadyExists")
        self.version += 1
        self.items[name] = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
        }
        return self.items[name]

    async def get(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        return self.items.get(name)

    async def patch_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        current = self.items.get(name)
        if current is None:
            raise NotFound(f"{name} not found", reason="NotFound")
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise Conflict("stale", reason="Conflict")
        self.version += 1
        merged = {**current, **{k: v for k, v in patch.items() if k != "metadata"}}
        merged["metadata"] = {**current["metadata"], "resourceVersion": str(self.version)}
        self.items[name] = merged
        return merged


def recorder(store: FakeJobRuns) -> Recorder:
    return Recorder(jobruns=cast(JobRunStore, store), namespace="ns", clock=FakeClock(start=TICK))


def test_a_missed_record_of_a_held_tick_is_taken_over_by_its_run() -> None:
    store = FakeJobRuns()
    job = validate_resource(scheduled_job("report", namespace="ns"))
    rec = recorder(store)

    async def scenario() -> None:
        await store.create(namespace="ns", body=operator_missed(job.name))
        await rec.start_tick(job, tick=TICK, holder="pod-a", token=4)

    asyncio.run(scenario())
    [record] = store.items.values()
    assert record["status"]["outcome"] == "Running" and record["status"]["message"] == ""
    assert record["spec"]["holder"] == "pod-a" and record["spec"]["fencingToken"] == 4


def test_a_tick_someone_else_runs_is_not_taken_over() -> None:
    store = FakeJobRuns()
    job = validate_resource(scheduled_job("report", namespace="ns"))
    rec = recorder(store)

    async def scenario() -> None:
        await rec.start_tick(job, tick=TICK, holder="pod-a", token=4)
        await rec.start_tick(job, tick=TICK, holder="pod-b", token=5)

    with pytest.raises(AlreadyExists):
        asyncio.run(scenario())
    assert next(iter(store.items.values()))["spec"]["holder"] == "pod-a"


class UnreadableJobRuns(FakeJobRuns):
    """The create answers AlreadyExists, then the store cannot be read."""

    async def get(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        raise Unavailable("connection refused", reason="Unreachable")


def test_a_run_on_record_that_cannot_be_read_stays_the_record() -> None:
    store = UnreadableJobRuns()
    job = validate_resource(scheduled_job("report", namespace="ns"))
    rec = recorder(store)

    async def scenario() -> None:
        await rec.start_tick(job, tick=TICK, holder="pod-a", token=4)
        await rec.start_tick(job, tick=TICK, holder="pod-b", token=None)

    with pytest.raises(AlreadyExists):
        asyncio.run(scenario())


class LostReplyJobRuns(FakeJobRuns):
    """Every create lands, and its reply is lost."""

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        await super().create(namespace=namespace, body=body)
        raise OutcomeUnknown("reply lost", reason="NoResponse")


def test_a_run_record_whose_create_reply_was_lost_is_read_back_and_kept() -> None:
    store = LostReplyJobRuns()
    job = validate_resource(scheduled_job("report", namespace="ns"))
    rec = recorder(store)

    run = asyncio.run(rec.start_tick(job, tick=TICK, holder="pod-a", token=4))
    assert run.name in store.items and store.items[run.name]["spec"]["holder"] == "pod-a"


def test_records_kept_for_later_are_written_once_the_store_answers() -> None:
    store = FakeJobRuns()
    job = validate_resource(scheduled_job("report", namespace="ns"))
    rec = recorder(store)
    done = JobRun.for_tick(
        job="report", tick=TICK, holder="pod-a", start=TICK, namespace="ns"
    ).finish(outcome=Outcome.UNGUARDED, end=TICK)

    async def scenario() -> bool:
        await store.create(namespace="ns", body=operator_missed(job.name))
        rec.record_later(done, job_uid=None)
        return await rec.flush(timeout=5)

    assert asyncio.run(scenario())
    [record] = store.items.values()
    assert record["status"]["outcome"] == "Unguarded" and record["spec"]["holder"] == "pod-a"
