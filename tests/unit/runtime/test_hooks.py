"""Run hooks: which hooks hear which events, where they run, and that a hook's failure or
slowness never reaches the run."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from leasecron.models.clocks import FakeClock
from leasecron.models.specs import Bucket, Outcome, ScheduledJob
from leasecron.runtime import RunEvent, RunEventKind, Scheduler
from leasecron.runtime._context import JobContext
from leasecron.runtime._hooks import RunHooks, kind_of
from leasecron.runtime._invoke import HandlerEnd, HandlerRun
from leasecron.runtime._observe import RunObserver
from leasecron.runtime._registry import Handler, HandlerRegistry
from leasecron.testing.handlers import scheduled_job

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def event(kind: RunEventKind = RunEventKind.FAILED, *, job: str = "report") -> RunEvent:
    return RunEvent(
        kind=kind, job=job, namespace="ns", tick=TICK, holder="me", bucket=Bucket.ONCE_PER_TICK
    )


def hook_errors(kind: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "leasecron_hook_errors_total", {"event": kind, "reason": reason}
    )
    return value or 0.0


def test_a_hook_for_one_kind_hears_only_that_kind_and_a_plain_hook_hears_every_kind() -> None:
    heard: list[tuple[str, RunEventKind]] = []
    hooks = RunHooks([lambda e: heard.append(("all", e.kind))])
    hooks.add(lambda e: heard.append(("failures", e.kind)), kinds=(RunEventKind.FAILED,))
    for kind in RunEventKind:
        hooks.emit(event(kind))
    assert hooks.flush(timeout=5)
    assert [k for who, k in heard if who == "all"] == list(RunEventKind)
    assert [k for who, k in heard if who == "failures"] == [RunEventKind.FAILED]


def test_no_hook_wants_a_kind_nobody_subscribed_to() -> None:
    hooks = RunHooks()
    hooks.add(print, kinds=(RunEventKind.FAILED,))
    assert hooks.wants(RunEventKind.FAILED)
    assert not hooks.wants(RunEventKind.SKIPPED)


def test_plain_hooks_run_in_order_on_the_hook_thread_not_the_callers() -> None:
    threads: list[str] = []
    jobs: list[str] = []

    def hook(e: RunEvent) -> None:
        threads.append(threading.current_thread().name)
        jobs.append(e.job)

    hooks = RunHooks([hook])
    for n in range(20):
        hooks.emit(event(job=f"job-{n}"))
    assert hooks.flush(timeout=5)
    assert set(threads) == {"leasecron-hooks"}
    assert jobs == [f"job-{n}" for n in range(20)]


def test_a_hook_that_raises_is_counted_and_the_next_hooks_still_run() -> None:
    heard: list[str] = []

    def broken(e: RunEvent) -> None:
        raise RuntimeError("tracker down")

    hooks = RunHooks([broken, lambda e: heard.append(e.job)])
    before = hook_errors("failed", "raised")
    hooks.emit(event())
    hooks.emit(event(job="second"))
    assert hooks.flush(timeout=5)
    assert heard == ["report", "second"]
    assert hook_errors("failed", "raised") == before + 2


def test_async_hooks_run_on_the_emitting_loop_and_their_errors_are_counted() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def remember(e: RunEvent) -> None:
        loops.append(asyncio.get_running_loop())

    async def broken(e: RunEvent) -> None:
        raise ValueError("no")

    hooks = RunHooks([remember, broken])
    before = hook_errors("succeeded", "raised")

    async def main() -> asyncio.AbstractEventLoop:
        hooks.emit(event(RunEventKind.SUCCEEDED))
        assert await hooks.drain(timeout=5)
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert loops == [loop]
    assert hook_errors("succeeded", "raised") == before + 1


def test_an_async_hook_emitted_outside_any_loop_still_runs() -> None:
    heard: list[str] = []

    async def hook(e: RunEvent) -> None:
        await asyncio.sleep(0)
        heard.append(e.job)

    hooks = RunHooks([hook])
    hooks.emit(event())
    assert hooks.flush(timeout=5)
    assert heard == ["report"]


def test_events_beyond_the_queue_limit_are_dropped_and_counted_not_queued() -> None:
    release = threading.Event()
    heard: list[str] = []

    def slow(e: RunEvent) -> None:
        release.wait(5)
        heard.append(e.job)

    hooks = RunHooks([slow], limit=3)
    before = hook_errors("skipped", "dropped")
    for n in range(5):
        hooks.emit(event(RunEventKind.SKIPPED, job=f"job-{n}"))
    release.set()
    assert hooks.flush(timeout=5)
    assert heard == ["job-0", "job-1", "job-2"]
    assert hook_errors("skipped", "dropped") == before + 2


def test_flush_gives_up_after_its_timeout_while_a_hook_still_runs() -> None:
    release = threading.Event()
    hooks = RunHooks([lambda e: release.wait(5)])
    hooks.emit(event())
    assert not hooks.flush(timeout=0.05)
    release.set()
    assert hooks.flush(timeout=5)


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        (Outcome.SUCCEEDED, RunEventKind.SUCCEEDED),
        (Outcome.UNGUARDED, RunEventKind.SUCCEEDED),
        (Outcome.FAILED, RunEventKind.FAILED),
        (Outcome.LOST_LOCK, RunEventKind.FAILED),
        (Outcome.TIMED_OUT, RunEventKind.FAILED),
    ],
)
def test_a_run_that_returned_succeeded_and_any_other_end_failed(
    outcome: Outcome, kind: RunEventKind
) -> None:
    assert kind_of(outcome) is kind


def test_the_scheduler_decorators_subscribe_to_one_kind_each() -> None:
    everything: list[RunEvent] = []
    scheduler = Scheduler(namespace="ns", hooks=[everything.append])
    heard: dict[str, list[RunEventKind]] = {}

    for name in ("on_start", "on_success", "on_failure", "on_skip"):
        register = getattr(scheduler, name)

        def remember(e: RunEvent, name: str = name) -> None:
            heard.setdefault(name, []).append(e.kind)

        assert register(remember) is remember
    hooks = scheduler._settings.hooks
    for kind in RunEventKind:
        hooks.emit(event(kind))
    assert hooks.flush(timeout=5)
    assert heard == {
        "on_start": [RunEventKind.STARTED],
        "on_success": [RunEventKind.SUCCEEDED],
        "on_failure": [RunEventKind.FAILED],
        "on_skip": [RunEventKind.SKIPPED],
    }
    assert [e.kind for e in everything] == list(RunEventKind)


# --- the observer around a real handler call ------------------------------------------------


def context(token: int | None = 4) -> JobContext:
    return JobContext(
        job="report",
        namespace="ns",
        tick=TICK,
        holder="me",
        bucket=Bucket.ONCE_PER_TICK,
        token=token,
    )


def observed_run(fn: Handler, observer: RunObserver) -> tuple[JobContext, HandlerEnd]:
    handler = HandlerRegistry().register("h", fn)
    ctx = context()
    pool = ThreadPoolExecutor(1)

    async def main() -> HandlerEnd:
        call = HandlerRun(
            handler,
            ctx,
            executor=pool,
            clock=FakeClock(start=TICK),
            on_call=observer.calling(ctx),
        )
        call.start()
        end = await call.wait()
        assert end is not None
        observer.ended(ctx, end, Outcome.FAILED if end.error else Outcome.SUCCEEDED, "")
        return end

    try:
        return ctx, asyncio.run(main())
    finally:
        pool.shutdown(wait=False)


@pytest.mark.parametrize("is_async", [False, True])
def test_started_is_heard_before_the_handler_runs_and_the_end_after_it(is_async: bool) -> None:
    log: list[str] = []
    observer = RunObserver(RunHooks([lambda e: log.append(e.kind.value)]))

    def sync_handler(ctx: JobContext) -> None:
        assert observer.hooks.flush(timeout=5)
        log.append("handler")

    async def async_handler(ctx: JobContext) -> None:
        sync_handler(ctx)

    _, end = observed_run(async_handler if is_async else sync_handler, observer)
    assert end.error is None
    assert observer.hooks.flush(timeout=5)
    assert log == ["started", "handler", "succeeded"]


def test_a_failed_run_tells_the_hooks_its_error_token_and_duration() -> None:
    heard: list[RunEvent] = []
    observer = RunObserver(RunHooks([heard.append]))
    problem = RuntimeError("disk full")

    def handler(ctx: JobContext) -> None:
        raise problem

    ctx, end = observed_run(handler, observer)
    assert observer.hooks.flush(timeout=5)
    started, failed = heard
    assert (started.kind, started.token, started.outcome) == (RunEventKind.STARTED, 4, None)
    assert failed.kind is RunEventKind.FAILED and failed.error is problem
    assert (failed.job, failed.tick, failed.holder, failed.bucket) == (
        ctx.job,
        TICK,
        "me",
        Bucket.ONCE_PER_TICK,
    )
    assert failed.outcome is Outcome.FAILED and failed.duration == end.duration


def test_a_hook_that_raises_does_not_change_the_handlers_end() -> None:
    def broken(e: RunEvent) -> None:
        raise RuntimeError("hook bug")

    observer = RunObserver(RunHooks([broken]))
    _, end = observed_run(lambda ctx: None, observer)
    assert observer.hooks.flush(timeout=5)
    assert end.error is None and not end.abandoned


def test_a_skip_carries_its_reason_and_the_job_bucket() -> None:
    heard: list[RunEvent] = []
    observer = RunObserver(RunHooks([heard.append]))
    job = ScheduledJob.from_resource(scheduled_job("report", schedule="@every 1s"))
    observer.skipped(job, namespace="ns", holder="me", reason="taken", tick=TICK)
    assert observer.hooks.flush(timeout=5)
    assert [(e.kind, e.reason, e.tick, e.bucket) for e in heard] == [
        (RunEventKind.SKIPPED, "taken", TICK, Bucket.ONCE_PER_TICK)
    ]
