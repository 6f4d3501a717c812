"""`Scheduler.run_once` and `leasecron.testing.handlers.run_tick`: one tick of a registered
handler against the cluster, as a replica runs it, with its context captured."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore
from leasecron.models.names import jobrun_name
from leasecron.runtime import Tuning
from leasecron.testing import poll
from leasecron.testing.faults import Fault, fault_plan
from leasecron.testing.handlers import CapturingHandler, run_tick_sync, scheduled_job

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)
TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def scheduler(kube: Kube, namespace: str) -> Scheduler:
    return Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)


def test_one_tick_of_a_once_per_tick_job_is_claimed_recorded_and_captured(
    scheduler: Scheduler, namespace: str
) -> None:
    def report(ctx: JobContext) -> None:
        ctx.assert_held()
        ctx.logger.info("report written", key=ctx.idempotency_key)

    scheduler.register("nightly_report", report)
    manifest = scheduled_job("nightly-report", schedule="0 2 * * *", handler="nightly_report")
    result = run_tick_sync(scheduler, manifest, tick=TICK)
    assert result.outcome == "Succeeded"
    assert result.context.tick == TICK and result.context.token == 1
    assert result.context.idempotency_key == f"{namespace}/nightly-report/2026-03-01T02:00:00Z"
    assert result.jobrun is not None and result.jobrun["status"]["outcome"] == "Succeeded"
    written = [e for e in result.logs if e["event"] == "report written"]
    assert written and written[0]["token"] == 1 and written[0]["job"] == "nightly-report"


def test_a_handler_that_raises_is_reported_failed_with_its_message(
    scheduler: Scheduler,
) -> None:
    def broken(ctx: JobContext) -> None:
        raise ValueError("no such table: invoices")

    scheduler.register("broken", broken)
    result = run_tick_sync(scheduler, scheduled_job("broken"), tick=TICK)
    assert result.outcome == "Failed"
    assert result.result.message == "ValueError: no such table: invoices"
    assert result.jobrun is not None
    assert result.jobrun["status"]["message"] == "ValueError: no such table: invoices"


def test_a_tick_already_taken_does_not_run_again(scheduler: Scheduler) -> None:
    capture = CapturingHandler()
    scheduler.register("once", capture)
    first = run_tick_sync(scheduler, scheduled_job("once"), tick=TICK)
    second = run_tick_sync(scheduler, "once", tick=TICK)
    assert first.outcome == "Succeeded" and second.outcome is None
    assert capture.calls == 1


def test_every_replica_runs_locally_without_a_token_or_a_record(scheduler: Scheduler) -> None:
    capture = CapturingHandler()
    scheduler.register("refresh", capture.run_async)
    result = run_tick_sync(scheduler, scheduled_job("refresh", bucket="every-replica"), tick=TICK)
    assert result.outcome == "Succeeded" and result.jobrun is None
    assert result.context.token is None and capture.calls == 1


def test_a_single_owner_job_runs_one_term_until_its_handler_returns(
    scheduler: Scheduler,
) -> None:
    def drain(ctx: JobContext) -> None:
        ctx.assert_held()

    scheduler.register("drain", drain)
    election = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}
    result = run_tick_sync(
        scheduler, scheduled_job("drain", bucket="single-owner", election=election)
    )
    assert result.outcome == "Succeeded"
    assert (
        result.jobrun is not None and result.jobrun["metadata"]["name"] == "drain-term-1"
    )  # a job's first token is 1
    assert result.jobrun["status"]["outcome"] == "Succeeded"


def test_a_tick_whose_record_landed_unconfirmed_is_recorded_missed_and_never_left_running(
    scheduler: Scheduler, kube: Kube
) -> None:
    """The JobRun create lands but its reply is lost, and the read-back fails too: the handler
    is not started (nothing confirms the tick is ours to record), and the record that landed
    ends Missed with the reason, not Running for good."""
    capture = CapturingHandler()
    scheduler.register("unsure", capture)
    manifest: dict[str, Any] = scheduled_job("unsure", schedule="@every 1h")
    lost = Fault(verb="create", resource="jobruns", action="lose_reply", times=1)
    unread = Fault(verb="get", resource="jobruns", action="fail", times=1)
    plan = fault_plan(kube)
    with plan.injected(lost), plan.injected(unread):
        result = run_tick_sync(scheduler, manifest, tick=TICK)
    assert capture.calls == 0 and result.outcome is None
    name = jobrun_name("unsure", TICK)
    run = poll(
        lambda: _final(kube, scheduler.namespace, name),
        timeout=30,
        what=f"JobRun {name} finished",
    )
    assert run["status"]["outcome"] == "Missed"
    assert "could not be confirmed" in run["status"]["message"]


def _final(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    found = asyncio.run(JobRunStore(kube).get(namespace=namespace, name=name))
    outcome = ((found or {}).get("status") or {}).get("outcome")
    return found if outcome not in (None, "Running") else None
