"""APScheduler 3.x: the run time the executor gets reaches the job's call, through the real
library's `run_job`, and `guarded(scheduler)` wraps a scheduler's executors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.executors.base import run_job
from apscheduler.executors.debug import DebugExecutor
from apscheduler.executors.pool import ProcessPoolExecutor, ThreadPoolExecutor
from apscheduler.job import Job
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from leasecron.integrations import _firing
from leasecron.integrations.apscheduler import GuardedExecutor, _FiringJob, guarded

LONG_AGO = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def a_job(scheduler: Any, func: Any, *, job_id: str = "report") -> Job:
    job = Job(
        scheduler,
        id=job_id,
        func=func,
        trigger=IntervalTrigger(seconds=10, timezone="UTC"),
        executor="default",
        args=(),
        kwargs={},
        max_instances=1,
        misfire_grace_time=1,
        coalesce=False,
        name=job_id,
        next_run_time=None,
    )
    job._jobstore_alias = "default"
    return job


def test_each_call_of_run_job_sees_its_own_run_time_even_past_the_misfire_grace() -> None:
    seen: list[_firing.Firing | None] = []
    run_times = [LONG_AGO, LONG_AGO + timedelta(seconds=10)]
    job = a_job(BackgroundScheduler(), lambda: seen.append(_firing.fire_time()))

    events = run_job(_FiringJob(job, run_times, job.func, {}), "default", run_times, "test")

    assert [f.at if f else None for f in seen] == run_times
    assert all(f is not None and f.job_id == "report" for f in seen)
    assert all(f is not None and f.starting_deadline == timedelta(seconds=1) for f in seen)
    assert all(f is not None and f.interval == timedelta(seconds=10) for f in seen)
    assert len(events) == 2  # both executed (the guard, not run_job, judges the deadline)


def test_a_job_the_executor_does_not_guard_runs_as_it_is() -> None:
    scheduler = BackgroundScheduler()
    executor = GuardedExecutor(DebugExecutor(), jobs=["another"])
    executor.start(scheduler, "default")
    seen: list[_firing.Firing | None] = []
    job = a_job(scheduler, lambda: seen.append(_firing.fire_time()))

    executor.submit_job(job, [datetime.now(UTC)])

    assert seen == [None]


def test_guarded_wraps_every_executor_of_a_scheduler_that_has_not_started() -> None:
    scheduler = BackgroundScheduler(executors={"slow": ThreadPoolExecutor(2)})
    guarded(scheduler, namespace="default")
    assert isinstance(scheduler._lookup_executor("slow"), GuardedExecutor)
    assert isinstance(scheduler._lookup_executor("default"), GuardedExecutor)


def test_guarded_after_start_is_refused() -> None:
    scheduler = BackgroundScheduler()
    scheduler.start(paused=True)
    try:
        with pytest.raises(RuntimeError, match=r"before scheduler\.start"):
            guarded(scheduler)
    finally:
        scheduler.shutdown(wait=False)


def test_a_process_pool_cannot_be_guarded() -> None:
    pool = ProcessPoolExecutor(1)
    try:
        with pytest.raises(TypeError, match="process pool"):
            GuardedExecutor(pool)
    finally:
        pool.shutdown(wait=False)
