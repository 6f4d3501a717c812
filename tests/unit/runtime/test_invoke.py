"""Running handlers: async as tasks, sync in threads, interruption and grace."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import structlog

from leasecron.models.clocks import FakeClock
from leasecron.models.specs import Bucket
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerEnd, HandlerRun
from leasecron.runtime._registry import Handler, HandlerRegistry

TICK = datetime(2026, 1, 1, tzinfo=UTC)


def context() -> JobContext:
    return JobContext(
        job="sweeper", namespace="ns", tick=TICK, holder="me", bucket=Bucket.SINGLE_OWNER, token=3
    )


def run(fn: Handler, *, stop_after_start: bool = False, grace: float = 5.0) -> HandlerEnd:
    registry = HandlerRegistry()
    handler = registry.register("h", fn)

    pool = ThreadPoolExecutor(2)

    async def main() -> HandlerEnd:
        call = HandlerRun(handler, context(), executor=pool, clock=FakeClock(start=TICK))
        call.start()
        if stop_after_start:
            await asyncio.sleep(0)
            return await call.stop(grace=grace)
        end = await call.wait()
        assert end is not None
        return end

    try:
        return asyncio.run(main())
    finally:
        pool.shutdown(wait=False)


def test_an_async_handler_that_returns_ends_without_error() -> None:
    seen: list[int | None] = []

    async def handler(ctx: JobContext) -> None:
        seen.append(ctx.token)

    end = run(handler)
    assert end.error is None and not end.interrupted and not end.abandoned
    assert seen == [3]


def test_a_sync_handler_runs_in_another_thread() -> None:
    threads: list[str] = []

    def handler(ctx: JobContext) -> None:
        threads.append(threading.current_thread().name)

    run(handler)
    assert threads and threads[0] != threading.current_thread().name


def test_the_exception_a_handler_raises_is_reported_not_propagated() -> None:
    def handler(ctx: JobContext) -> None:
        raise RuntimeError("disk full")

    end = run(handler)
    assert isinstance(end.error, RuntimeError) and str(end.error) == "disk full"


def test_interrupting_an_async_handler_cancels_its_task() -> None:
    cancelled = []

    async def handler(ctx: JobContext) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(ctx.lost.is_set())
            raise

    end = run(handler, stop_after_start=True)
    assert end.interrupted and end.error is None and not end.abandoned
    assert cancelled == [True]


def test_interrupting_a_sync_handler_sets_lost_and_it_returns() -> None:
    def handler(ctx: JobContext) -> None:
        assert ctx.lost.wait(30)

    end = run(handler, stop_after_start=True)
    assert end.interrupted and not end.abandoned and end.error is None


def test_a_sync_handler_that_ignores_lost_is_abandoned_after_the_grace_period() -> None:
    release = threading.Event()

    def handler(ctx: JobContext) -> None:
        release.wait(30)

    try:
        end = run(handler, stop_after_start=True, grace=0.05)
    finally:
        release.set()
    assert end.abandoned and end.interrupted


def test_the_runs_context_is_bound_for_the_handlers_own_log_lines() -> None:
    bound: list[dict[str, object]] = []

    def handler(ctx: JobContext) -> None:
        bound.append(structlog.contextvars.get_contextvars())

    run(handler)
    assert bound[0]["job"] == "sweeper" and bound[0]["token"] == 3
    assert bound[0]["tick"] == "2026-01-01T00:00:00Z"
    assert structlog.contextvars.get_contextvars() == {}
