"""spec.timeout, spec.retry and spec.concurrencyPolicy in the runtime, without a cluster: when
an attempt is retried, how a timed-out or replaced run is recorded, how a stop reaches each
attempt, what a new tick does beside a run that still goes, and how a retried run's record
carries its attempts."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from test_deferred_records import CountingJobRuns

from leasecron.kube.jobruns import JobRunStore
from leasecron.models.clocks import FakeClock
from leasecron.models.specs import (
    Attempt,
    Bucket,
    ConcurrencyPolicy,
    JobRun,
    Outcome,
    RetrySpec,
    validate_resource,
)
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerEnd, HandlerRun, RunControl, StopReason
from leasecron.runtime._overlap import Overlapping, make_way
from leasecron.runtime._records import Recorder, outcome_of
from leasecron.runtime._registry import Handler, HandlerRegistry
from leasecron.runtime._retries import NoRetry, Retry, decide, final_message
from leasecron.runtime._timeouts import STOP_GRACE, Timeout, stop_grace, timeout_of
from leasecron.testing.handlers import scheduled_job

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
NEXT = TICK + timedelta(hours=1)
RETRY = RetrySpec(limit=3, backoff=timedelta(seconds=10))


def job(**spec: Any) -> Any:
    return validate_resource(scheduled_job("report", namespace="ns", schedule="@hourly", **spec))


def after(attempt: int, outcome: Outcome, **overrides: Any) -> Retry | NoRetry:
    args: dict[str, Any] = {
        "retry": RETRY,
        "attempt": attempt,
        "outcome": outcome,
        "now": TICK,
        "next_tick": NEXT,
        "policy": ConcurrencyPolicy.FORBID,
        "bound": None,
    } | overrides
    return decide(**args)


# --- retries ------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.TIMED_OUT])
def test_a_failed_or_timed_out_attempt_is_retried_after_a_doubling_backoff(
    outcome: Outcome,
) -> None:
    assert after(1, outcome) == Retry(attempt=2, at=TICK + timedelta(seconds=10))
    assert after(2, outcome) == Retry(attempt=3, at=TICK + timedelta(seconds=20))
    assert after(3, outcome) == Retry(attempt=4, at=TICK + timedelta(seconds=40))


def test_retries_stop_at_the_limit_without_a_reason_to_give() -> None:
    assert after(4, Outcome.FAILED) == NoRetry()
    no_retries = RetrySpec(limit=0, backoff=timedelta(seconds=10))
    assert after(1, Outcome.FAILED, retry=no_retries) == NoRetry()


@pytest.mark.parametrize(
    "outcome", [Outcome.SUCCEEDED, Outcome.LOST_LOCK, Outcome.UNGUARDED, Outcome.MISSED]
)
def test_an_attempt_that_succeeded_or_lost_its_grant_is_not_retried(outcome: Outcome) -> None:
    assert after(1, outcome) == NoRetry()


@pytest.mark.parametrize("policy", [ConcurrencyPolicy.FORBID, ConcurrencyPolicy.REPLACE])
def test_a_retry_never_starts_at_or_after_the_next_tick_unless_overlap_is_allowed(
    policy: ConcurrencyPolicy,
) -> None:
    at_next = TICK + timedelta(seconds=10)
    step = after(1, Outcome.FAILED, next_tick=at_next, policy=policy)
    assert isinstance(step, NoRetry)
    assert "attempt 2 would start at or after the next tick" in step.why
    assert policy.value in step.why
    allowed = after(1, Outcome.FAILED, next_tick=at_next, policy=ConcurrencyPolicy.ALLOW)
    assert allowed == Retry(attempt=2, at=at_next)


def test_a_retry_never_starts_after_the_claims_at_most_for() -> None:
    step = after(1, Outcome.FAILED, bound=TICK + timedelta(seconds=5))
    assert isinstance(step, NoRetry) and "lock.atMostFor" in step.why
    step = after(1, Outcome.FAILED, policy=ConcurrencyPolicy.ALLOW, bound=TICK)
    assert isinstance(step, NoRetry)


def test_the_message_of_a_retried_run_counts_its_attempts_and_says_why_retries_stopped() -> None:
    assert final_message("ValueError: x", attempts=1, limit=0, why="") == "ValueError: x"
    assert final_message("", attempts=3, limit=3, why="") == "attempt 3 of 4"
    stopped = final_message("ValueError: x", attempts=2, limit=3, why="the next tick")
    assert stopped == "ValueError: x (attempt 2 of 4; retries stopped: the next tick)"


def test_a_retried_runs_record_carries_its_attempts_while_it_goes_and_at_its_end() -> None:
    run = JobRun.for_tick(job="report", tick=TICK, holder="a", start=TICK, fencing_token=4)
    first = Attempt(start=TICK, end=TICK, outcome=Outcome.FAILED, message="boom")
    going = run.retrying(attempts=(first,), message="attempt 2 at ...")
    assert going.status.outcome is Outcome.RUNNING and going.status.attempts == (first,)
    assert going.spec == run.spec
    second = Attempt(start=TICK, end=TICK, outcome=Outcome.SUCCEEDED)
    done = going.finish(outcome=Outcome.SUCCEEDED, end=TICK, attempts=(first, second))
    status = done.to_resource()["status"]
    assert [a["outcome"] for a in status["attempts"]] == ["Failed", "Succeeded"]
    assert "attempts" not in run.finish(outcome=Outcome.SUCCEEDED, end=TICK).status_patch()


def test_the_attempts_so_far_are_patched_in_order_before_the_final_status() -> None:
    store = CountingJobRuns()
    first = Attempt(start=TICK, end=TICK, outcome=Outcome.FAILED, message="boom")

    async def scenario() -> None:
        clock = FakeClock(start=TICK)
        rec = Recorder(jobruns=cast(JobRunStore, store), namespace="ns", clock=clock)
        entry = rec.deferred.start(job(), tick=TICK, holder="a", token=7, now=TICK)
        assert entry is not None
        assert await rec.flush(timeout=5)
        rec.deferred.progress(entry, attempts=(first,), message="attempt 2 at ...")
        assert await rec.flush(timeout=5)
        second = Attempt(start=TICK, end=TICK, outcome=Outcome.SUCCEEDED)
        rec.deferred.finish(
            entry, outcome=Outcome.SUCCEEDED, message="", now=TICK, attempts=(first, second)
        )
        rec.deferred.progress(entry, attempts=(first,), message="too late")  # ignored
        assert await rec.flush(timeout=5)

    asyncio.run(scenario())
    assert store.writes == ["create Running", "patch Running", "patch Succeeded"]
    [record] = store.items.values()
    assert [a["outcome"] for a in record["status"]["attempts"]] == ["Failed", "Succeeded"]


# --- timeouts -----------------------------------------------------------------------------


def end(*, interrupted: bool = True, abandoned: bool = False, error: Any = None) -> HandlerEnd:
    return HandlerEnd(error=error, interrupted=interrupted, abandoned=abandoned, duration=2.0)


def test_a_run_stopped_at_its_timeout_is_timed_out_with_how_long_it_had() -> None:
    outcome, message = outcome_of(
        end(), reason=StopReason.TIMED_OUT, unguarded=False, term=False, note="after 2s"
    )
    assert (outcome, message) == (Outcome.TIMED_OUT, "the run timed out after 2s")
    outcome, message = outcome_of(
        end(abandoned=True), reason=StopReason.TIMED_OUT, unguarded=False, term=False
    )
    assert outcome is Outcome.TIMED_OUT and "did not stop within the grace period" in message
    outcome, message = outcome_of(
        end(error=RuntimeError("stop")), reason=StopReason.TIMED_OUT, unguarded=False, term=False
    )
    assert outcome is Outcome.TIMED_OUT and "RuntimeError: stop" in message


def test_a_run_replaced_by_a_later_tick_failed_and_says_by_which() -> None:
    outcome, message = outcome_of(
        end(), reason=StopReason.REPLACED, unguarded=False, term=False, note="by tick T2"
    )
    assert (outcome, message) == (Outcome.FAILED, "the handler was stopped: replaced by tick T2")


def test_the_timeout_and_its_stop_grace_come_from_the_spec_and_the_schedulers_grace() -> None:
    assert timeout_of(job(), grace_period=25.0) is None
    limit = timeout_of(job(timeout="90s"), grace_period=25.0)
    assert limit == Timeout(seconds=90.0, grace=STOP_GRACE, limit=timedelta(seconds=90))
    assert limit.note == "after 1m30s"
    assert stop_grace(3.0) == 3.0 and stop_grace(60.0) == STOP_GRACE


def call(fn: Handler, pool: ThreadPoolExecutor) -> HandlerRun:
    handler = HandlerRegistry().register("h", fn)
    ctx = JobContext(
        job="report", namespace="ns", tick=TICK, holder="me", bucket=Bucket.ONCE_PER_TICK
    )
    return HandlerRun(handler, ctx, executor=pool, clock=FakeClock(start=TICK))


def run_with(fn: Handler, *, limit: Timeout, control: RunControl | None = None) -> HandlerEnd:
    pool = ThreadPoolExecutor(2)
    control = control or RunControl()

    async def main() -> HandlerEnd:
        return await control.run(call(fn, pool), limit=limit)

    try:
        return asyncio.run(main())
    finally:
        pool.shutdown(wait=False)


SHORT = Timeout(seconds=0.01, grace=5.0, limit=timedelta(seconds=1))


def test_an_async_handler_past_its_timeout_is_cancelled_and_the_control_says_why() -> None:
    cancelled = threading.Event()

    async def forever(ctx: JobContext) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    control = RunControl()
    ended = run_with(forever, limit=SHORT, control=control)
    assert cancelled.is_set() and ended.interrupted and not ended.abandoned
    assert control.reason is StopReason.TIMED_OUT and control.note == "after 1s"


def test_a_sync_handler_past_its_timeout_is_told_to_stop_and_given_up_on_after_the_grace() -> None:
    release = threading.Event()

    def stubborn(ctx: JobContext) -> None:
        release.wait(30)

    try:
        ended = run_with(stubborn, limit=Timeout(seconds=0.01, grace=0.05, limit=SHORT.limit))
    finally:
        release.set()
    assert ended.abandoned


def test_a_handler_that_ends_in_time_is_not_stopped() -> None:
    async def quick(ctx: JobContext) -> None:
        return None

    control = RunControl()
    ended = run_with(quick, limit=Timeout(seconds=30, grace=1, limit=SHORT.limit), control=control)
    assert not ended.interrupted and control.reason is None


def test_a_stop_of_the_dispatch_reaches_every_attempt_but_an_attempts_timeout_stays_its_own() -> (
    None
):
    dispatch = RunControl()
    first = dispatch.attempt()
    first.request_stop(StopReason.TIMED_OUT, grace=1.0)
    assert first.stopping and not dispatch.stopping
    second = dispatch.attempt()
    dispatch.request_stop(StopReason.LOST, grace=2.0, note="n")
    assert (second.reason, second.grace, second.note) == (StopReason.LOST, 2.0, "n")
    assert first.reason is StopReason.TIMED_OUT  # the first reason wins
    third = dispatch.attempt()
    assert third.reason is StopReason.LOST


# --- overlap ------------------------------------------------------------------------------


def overlap(policy: str, *, wait: float = 0.0) -> tuple[bool, RunControl, bool]:
    """A run that ends only when told to stop, and a new tick under `policy`: whether the
    new tick may start, the old run's control, and whether the old run has ended."""

    async def main() -> tuple[bool, RunControl, bool]:
        control = RunControl()

        async def old_run() -> None:
            await control.wait_stopped(30)

        task = asyncio.get_running_loop().create_task(old_run())
        may = await make_way(
            [(task, control)],
            job=job(concurrencyPolicy=policy),
            tick=NEXT,
            grace=1.0,
            wait=wait,
        )
        ended = task.done()
        task.cancel()
        return may, control, ended

    return asyncio.run(main())


def test_forbid_skips_a_tick_while_the_previous_run_still_goes() -> None:
    may, control, ended = overlap("Forbid", wait=0.01)
    assert not may and not control.stopping and not ended


def test_replace_stops_the_previous_run_before_the_new_tick_starts() -> None:
    may, control, ended = overlap("Replace", wait=5.0)
    assert may and ended
    assert control.reason is StopReason.REPLACED and control.note == "by tick 2026-03-01T03:00:00Z"


def test_replace_waits_for_a_run_slow_to_stop_no_longer_than_the_new_tick_can_wait() -> None:
    """The stop grace (5 s) is longer than the run takes to end by itself (2 s): a Replace
    that waited out the grace would see it ended."""

    async def main() -> tuple[bool, bool, bool]:
        control = RunControl()

        async def deaf_run() -> None:
            await asyncio.sleep(2)  # does not look at its control

        task = asyncio.get_running_loop().create_task(deaf_run())
        may = await make_way(
            [(task, control)], job=job(concurrencyPolicy="Replace"), tick=NEXT, grace=5.0, wait=0.3
        )
        ended = task.done()
        task.cancel()
        return may, control.stopping, ended

    may, stopping, ended = asyncio.run(main())
    assert may and stopping and not ended  # told to stop, still stopping: the new tick starts


def test_allow_starts_the_new_tick_beside_the_previous_run() -> None:
    may, control, ended = overlap("Allow")
    assert may and not control.stopping and not ended


def test_the_earlier_runs_of_an_allow_job_are_kept_until_they_end() -> None:
    async def main() -> tuple[int, int]:
        earlier = Overlapping()
        gate = asyncio.Event()
        slow = asyncio.get_running_loop().create_task(gate.wait())
        done = asyncio.get_running_loop().create_task(asyncio.sleep(0))
        await done
        earlier.keep((slow, RunControl()))
        earlier.keep((done, RunControl()))
        earlier.keep(None)
        going = len(earlier.runs())
        gate.set()
        await slow
        return going, len(earlier.runs())

    assert asyncio.run(main()) == (1, 0)


def test_of_several_ticks_waiting_for_one_run_only_the_newest_starts() -> None:
    waiting = Overlapping()
    waiting.queue(TICK)
    waiting.queue(NEXT)
    waiting.queue(TICK + timedelta(minutes=30))
    assert not waiting.turn(TICK)
    assert waiting.turn(NEXT)
    assert waiting.turn(NEXT + timedelta(hours=1))  # nobody else waits
