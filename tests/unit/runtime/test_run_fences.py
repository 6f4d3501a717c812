"""The fence of a run under a shard grant (`runtime._shardfences.run_fence`): lost when the
grant's local deadline passes with nobody renewing it, lost at the run's own atMostFor for a
job that is not keepAlive, and one watchdog for all the runs under a grant, not one each."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from leasecron.coordination import Grant
from leasecron.models.clocks import SYSTEM_CLOCK
from leasecron.models.specs import ScheduledJob
from leasecron.runtime import _shardfences
from leasecron.runtime._shardfences import RunFence, run_fence
from leasecron.testing.handlers import scheduled_job


class _Owner:
    """A lock that never renews: the grant ends at its local deadline."""

    async def renew(self, grant: Grant) -> bool:
        return False

    async def release(self, grant: Grant) -> Any:
        return None

    def keep_alive(self, grant: Grant, **_: Any) -> Any:
        raise NotImplementedError


def _grant(seconds: float) -> Grant:
    return Grant(
        owner=_Owner(),
        tick=datetime(2026, 1, 1, tzinfo=UTC),
        acquired_at=time.monotonic(),
        namespace="ns",
        name="leasecron-shard-g-16-0",
        token=7,
        holder="a",
        expires_at=time.monotonic() + seconds,
        clock=SYSTEM_CLOCK,
    )


def _job(**lock: Any) -> ScheduledJob:
    return ScheduledJob.from_resource(
        scheduled_job("report", lock=lock) if lock else scheduled_job("report")
    )


def _no_link(fence: RunFence) -> Callable[[], None]:
    return lambda: None


def test_a_keep_alive_runs_fence_is_lost_when_its_grant_passes_its_deadline() -> None:
    grant = _grant(0.2)

    async def run() -> tuple[bool, RunFence]:
        with run_fence(grant, _job(), clock=SYSTEM_CLOCK, link=_no_link) as fence:
            assert fence.held
            return await fence.lost.wait_async(2.0), fence  # nobody reads `held` but the watch

    lost, fence = asyncio.run(run())

    assert lost and grant.lost.is_set()
    assert "expired by local time" in (fence.lost_reason + grant.lost_reason)


def test_a_run_that_is_not_keep_alive_loses_its_fence_at_its_own_at_most_for() -> None:
    grant = _grant(30.0)
    job = _job(keepAlive=False, atMostFor="1s")
    started = time.monotonic()

    async def run() -> tuple[bool, RunFence]:
        with run_fence(grant, job, clock=SYSTEM_CLOCK, link=_no_link) as fence:
            return await fence.lost.wait_async(3.0), fence

    lost, fence = asyncio.run(run())
    took = time.monotonic() - started

    assert lost and fence.lost_reason == "the run reached its atMostFor"
    assert 0.9 <= took < 2.5
    assert grant.held  # the grant itself goes on


def test_the_runs_under_one_grant_share_one_watchdog_task() -> None:
    grant, job = _grant(30.0), _job()

    async def run() -> tuple[int, int]:
        before = len(asyncio.all_tasks())
        with contextlib.ExitStack() as stack:
            for _ in range(200):
                stack.enter_context(run_fence(grant, job, clock=SYSTEM_CLOCK, link=_no_link))
            during = len(asyncio.all_tasks()) - before
        await asyncio.sleep(0)
        return during, len(asyncio.all_tasks()) - before

    during, after = asyncio.run(run())

    assert (during, after) == (1, 0)  # the last run out cancels it


def test_a_grant_is_not_kept_once_its_last_run_is_over() -> None:
    async def run() -> weakref.ref[Grant]:
        grant = _grant(30.0)
        with run_fence(grant, _job(), clock=SYSTEM_CLOCK, link=_no_link):
            await asyncio.sleep(0)
        return weakref.ref(grant)

    gone = asyncio.run(run())
    gc.collect()

    assert gone() is None and not _shardfences._WATCHES
