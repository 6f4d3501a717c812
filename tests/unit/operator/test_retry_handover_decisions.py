"""Retries handed over: a run whose holder vanished during a retry back-off is made a retry
request while the retry is due; one whose attempt may be going is Abandoned; a handed-over
retry nobody took by its bound is finished with the last attempt's outcome."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from operator_builders import START, clock, facts, lease, run, snapshot

from leasecron.models.clocks import FakeClock
from leasecron.models.handover import handover_patch, next_retry
from leasecron.models.requests import REQUEST_SELECTOR, read_request
from leasecron.models.specs import Attempt, ConcurrencyPolicy, JobRun, Outcome, RetrySpec
from leasecron.operator._history import plan_history
from leasecron.operator._observed import RunView
from leasecron.runtime._records import fenced_patch

TICK = START
RETRY = {"limit": 2, "backoff": "3s"}


def failed(at: FakeClock, *, ago: float = 1.0) -> Attempt:
    end = at.now() - timedelta(seconds=ago)
    return Attempt(start=end - timedelta(seconds=1), end=end, outcome=Outcome.FAILED)


def vanished(view: RunView, at: FakeClock, **job: object) -> tuple[object, object]:
    grant = lease(holder="replica-a", duration=5, observed_at=at.monotonic())
    at.advance(6)
    plan = plan_history(facts(**job), snapshot(at, shard=grant, runs=(view,)))
    return plan.handed_over, plan.abandoned


def test_a_run_whose_holder_vanished_in_the_back_off_is_handed_over() -> None:
    at = clock()
    view = dataclasses.replace(run(TICK, "Running"), attempts=(failed(at, ago=-6),))
    handed, abandoned = vanished(view, at, schedule="@every 1h", retry=RETRY)
    assert abandoned == ()
    assert [(r.name, h.attempt) for r, h in handed] == [(view.name, 2)]  # type: ignore[attr-defined]


def test_a_run_whose_next_attempt_is_marked_running_is_abandoned_not_handed_over() -> None:
    at = clock()
    going = Attempt(start=at.now(), outcome=Outcome.RUNNING)
    view = dataclasses.replace(run(TICK, "Running"), attempts=(failed(at, ago=-6), going))
    handed, abandoned = vanished(view, at, schedule="@every 1h", retry=RETRY)
    assert handed == ()
    assert abandoned == (view,)


def test_a_run_without_attempts_left_is_abandoned() -> None:
    at = clock()
    view = dataclasses.replace(run(TICK, "Running"), attempts=(failed(at, ago=-6),))
    handed, abandoned = vanished(
        view, at, schedule="@every 30s", retry={"limit": 0, "backoff": "3s"}
    )
    assert handed == ()
    assert abandoned == (view,)


def test_the_retry_is_due_until_the_next_tick_unless_concurrency_allows_overlap() -> None:
    at = clock()
    attempts = (failed(at),)
    retry = RetrySpec(limit=2, backoff=timedelta(minutes=5))
    job = facts(schedule="@every 30s")
    assert job.schedule is not None
    common = {"attempts": attempts, "retry": retry, "tick": TICK, "schedule": job.schedule}
    forbid = next_retry(
        **common, policy=ConcurrencyPolicy.FORBID, starting_deadline=timedelta(seconds=3)
    )
    allow = next_retry(
        **common, policy=ConcurrencyPolicy.ALLOW, starting_deadline=timedelta(seconds=3)
    )
    assert forbid is not None and allow is not None
    assert forbid.until == job.schedule.next_after(TICK)
    assert allow.until == attempts[0].end + retry.delay(2) + timedelta(seconds=3)  # type: ignore[operator]


def test_a_handed_over_retry_is_a_request_the_replicas_watch_and_pick_up() -> None:
    at = clock()
    body = JobRun.for_tick(
        job="report", tick=TICK, holder="replica-a", start=TICK, fencing_token=4
    ).to_resource()
    body["metadata"]["resourceVersion"] = "7"
    body["status"] = {"outcome": "Running", "attempts": [failed(at).to_dict()]}
    patch = handover_patch(resource_version="7", message="handed over")
    body["metadata"]["labels"].update(patch["metadata"]["labels"])
    body["status"].update(patch["status"])
    request = read_request(body)
    assert request is not None
    assert request.pending and request.retry and request.holder == "replica-a"
    assert [a.outcome for a in request.attempts] == [Outcome.FAILED]
    assert "Retry" in REQUEST_SELECTOR


def test_a_holders_status_write_carries_its_holder_and_token() -> None:
    record = JobRun.for_tick(
        job="report", tick=TICK, holder="replica-a", start=TICK, fencing_token=4
    )
    patch = fenced_patch(record.finish(outcome=Outcome.FAILED, end=START))
    assert patch["spec"] == {"holder": "replica-a", "fencingToken": 4}
    assert patch["status"]["outcome"] == "Failed"


def test_a_handed_over_retry_nobody_took_by_its_bound_is_finished_with_its_last_outcome() -> None:
    at = clock()
    view = dataclasses.replace(run(TICK, "Pending"), attempts=(failed(at),), retry=True)
    at.advance(40)
    plan = plan_history(facts(schedule="@every 30s", retry=RETRY), snapshot(at, runs=(view,)))
    assert [r.name for r, _ in plan.unclaimed] == [view.name]
    assert plan.abandoned == () and plan.expired == ()
