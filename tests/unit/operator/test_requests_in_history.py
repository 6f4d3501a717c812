"""Requested runs in the operator's judgement: a Pending request is not finished, never
pruned, never Abandoned, no evidence that its tick ran, not the last run; one nobody picked
up within startingDeadline of its creation expires."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from operator_builders import START, clock, facts, run, snapshot

from leasecron.operator._history import abandoned_runs, expired_requests, runs_to_prune
from leasecron.operator._jobstatus import last_run
from leasecron.operator._missed import PENDING, Memory, verdict
from leasecron.operator._plan import recheck_at


def request(created_ago: float) -> object:
    made = START - timedelta(seconds=created_ago)
    view = run(made, "Pending", holder="", token=None)
    return replace(view, created=made, trigger="Manual", start=None)


def test_a_pending_request_is_not_finished_pruned_or_abandoned() -> None:
    waiting = request(1)
    assert waiting.pending is not False and not waiting.finished
    assert runs_to_prune([waiting], succeeded=0, failed=0) == []
    assert abandoned_runs(facts(), snapshot(clock(), runs=(waiting,))) == []


def test_a_pending_request_is_awaited_for_its_tick_and_is_not_the_last_run() -> None:
    waiting = request(1)
    done = run(START - timedelta(seconds=10), "Succeeded")
    runs = {waiting.name: waiting}
    assert (
        verdict(facts(), snapshot(clock()), runs, waiting.tick, record_grace=timedelta(0))
        == PENDING
    )
    assert last_run([done, waiting])["outcome"] == "Succeeded"


def test_a_request_expires_once_its_starting_deadline_after_creation_passed() -> None:
    job = facts()  # startingDeadline 3s
    fresh, stale = request(2), request(4)
    at = clock()
    assert expired_requests(job, snapshot(at, runs=(fresh, stale))) == [stale]
    picked = replace(stale, holder="replica-a", outcome="Running")
    assert expired_requests(job, snapshot(at, runs=(picked,))) == []


def test_the_job_is_looked_at_again_when_a_request_would_expire() -> None:
    job, at = facts(), clock()
    view = snapshot(at, runs=(request(1),))
    again = recheck_at(job, view, Memory(since=START))
    assert again <= at.monotonic() + 2.1
