"""Guard the jobs of an APScheduler scheduler, 3.x or 4.x, so that each fire time runs on one
replica while every replica keeps its own scheduler.

The guard's tick is the job's *scheduled* fire time, not the moment the job happens to run: a
late or misfired run claims the tick it was scheduled for, and one that starts too late is
skipped with reason `deadline`.

- APScheduler 3.x: a job function never sees its fire time; the executor's `run_job` gets
  the run times. `GuardedExecutor` wraps an executor and hands each call of a job its run
  time; `guarded(scheduler)` wraps every executor of a scheduler that has not started, so
  that all of its jobs (or the ids in `jobs=`) are guarded under the guard name of their job
  id. The job's `misfire_grace_time` becomes the guard's starting deadline (unless
  `starting_deadline=` is given), measured from the run time: the wrapped executor hands
  every run time to the guard, which skips a call started more than the grace after it (no
  EVENT_JOB_MISSED is sent for it; the job's event carries the skip result). The interval
  trigger counts from each replica's start, so its fire times are snapped to the interval
  from the Unix epoch (a replica whose trigger fires 11 s into a 20 s grid claims the grid
  tick it fired in, and is not late by those 11 s); cron and date triggers fire at the same
  instants everywhere already. Coroutine jobs (AsyncIOScheduler) claim on the
  running loop, others in the executor's thread. Process pools are refused (a guard lives in
  one process).
- APScheduler 4.x: the running job is `apscheduler.current_job`, with its
  `scheduled_fire_time` and `schedule_id`; the scheduler drops a job past its
  `misfire_grace_time` before the call, the guard's starting deadline applies after it.

`guard_job(...)` decorates a job function on either version: the guard name defaults to the
job's id (3.x, under a `GuardedExecutor`) or schedule id (4.x); `every=`/`cron=` snap fire
times of interval triggers onto a grid every replica shares. The call returns the guard's
`GuardResult`; the body's own exception propagates.

Does not make APScheduler's data stores shared, and promises nothing about jobs added to a
3.x scheduler through executors added after `guarded()`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from leasecron.integrations import _firing

try:
    from apscheduler.executors.base import BaseExecutor  # type: ignore[import-untyped]
except ImportError:  # APScheduler 4.x: no executors of this kind

    class BaseExecutor:  # type: ignore[no-redef]
        def __init__(self) -> None:
            raise TypeError(
                "GuardedExecutor and guarded() are for APScheduler 3.x; with APScheduler 4.x "
                "decorate the job function with guard_job(...)"
            )


MARK = "__leasecron_guard__"
"""Attribute `guard_job` sets on the function it returns (its guard options)."""


def guard_job(name: str | None = None, **guard_options: Any) -> Callable[[Callable[..., Any]], Any]:
    """Decorate an APScheduler job function so that each fire time runs on one replica.

    `name`: the guard (its Lease is `leasecron-guard-<name>`); default the firing job's id.
    `guard_options`: those of `leasecron.runtime.Guard` (every, cron, time_zone, job,
    at_most_for, starting_deadline, ...)."""

    def decorate(func: Callable[..., Any]) -> Any:
        wrapped = _firing.guard_callable(func, name=name, options=guard_options, find=_firing_now)
        setattr(wrapped, MARK, guard_options)
        return wrapped

    return decorate


def _firing_now() -> _firing.Firing | None:
    """The call in progress: announced by a `GuardedExecutor` (3.x), or APScheduler 4.x's
    `current_job`."""
    found = _firing.fire_time()
    if found is not None:
        return found
    current = getattr(importlib.import_module("apscheduler"), "current_job", None)
    job = current.get(None) if current is not None else None
    if job is None or job.scheduled_fire_time is None:
        return None
    return _firing.Firing(at=job.scheduled_fire_time, job_id=job.schedule_id)


class GuardedExecutor(BaseExecutor):  # type: ignore[misc]
    """An APScheduler 3.x executor that runs the jobs it guards on one replica per run time.

    `executor`: the one that really runs them (default: the scheduler's default executor,
    made when the scheduler starts); `jobs`: the ids to guard (default all; a function
    decorated with `guard_job` is guarded by its decorator, with its run time from here);
    `guard_options`: those of `leasecron.runtime.Guard`, for every job (a `guard_job`'s own
    options override them)."""

    def __init__(
        self,
        executor: Any = None,
        *,
        jobs: Collection[str] | None = None,
        **guard_options: Any,
    ) -> None:
        super().__init__()
        if executor is not None:
            _check_executor(executor)
        self._inner = executor
        self._jobs = None if jobs is None else frozenset(jobs)
        self._options = guard_options

    def start(self, scheduler: Any, alias: str) -> None:
        if self._inner is None:
            self._inner = scheduler._create_default_executor()
            _check_executor(self._inner)
        super().start(scheduler, alias)
        self._inner.start(scheduler, alias)

    def shutdown(self, wait: bool = True) -> None:
        if self._inner is not None:
            self._inner.shutdown(wait)

    def submit_job(self, job: Any, run_times: list[datetime]) -> None:
        if hasattr(job.func, MARK):
            body = job.func
        elif self._jobs is None or job.id in self._jobs:
            body = _firing.guard_callable(job.func, name=None, options={}, find=_firing.fire_time)
        else:
            self._inner.submit_job(job, run_times)
            return
        self._inner.submit_job(_FiringJob(job, run_times, body, self._options), run_times)

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        raise NotImplementedError("submit_job hands every job to the wrapped executor")


def _check_executor(executor: Any) -> None:
    from apscheduler.executors.pool import ProcessPoolExecutor  # type: ignore[import-untyped]

    if isinstance(executor, ProcessPoolExecutor):
        raise TypeError(
            "a process pool cannot be guarded (a guard lives in one process): use a "
            "thread pool, asyncio or the default executor"
        )


class _FiringJob:
    """What the wrapped executor runs in place of `job`: the same job whose function, at each
    call, announces the next of `run_times` and calls `body`. APScheduler's own misfire check
    is off (it would skip a run time without a call); the guard's starting deadline, the
    job's `misfire_grace_time` unless told otherwise, does that check."""

    def __init__(
        self,
        job: Any,
        run_times: list[datetime],
        body: Callable[..., Any],
        options: Mapping[str, Any],
    ) -> None:
        self._job = job
        self.id = job.id
        self.name = job.name
        self._jobstore_alias = job._jobstore_alias
        self.max_instances = job.max_instances
        self.misfire_grace_time = None
        self.args, self.kwargs = job.args, job.kwargs
        grace = job.misfire_grace_time
        interval = getattr(job.trigger, "interval", None)
        self._pending: Iterator[_firing.Firing] = iter(
            [
                _firing.Firing(
                    at=at,
                    job_id=job.id,
                    starting_deadline=None if grace is None else timedelta(seconds=grace),
                    interval=interval if isinstance(interval, timedelta) else None,
                    options=options,
                )
                for at in run_times
            ]
        )
        self.func = _announcing(body, self._pending)

    def __str__(self) -> str:
        return str(self._job)


def _announcing(body: Callable[..., Any], pending: Iterator[_firing.Firing]) -> Any:
    """`body`, each call made while the next of `pending` is announced."""
    if _firing.is_async(body):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            with _firing.firing(next(pending)):
                return await body(*args, **kwargs)

        return call_async

    def call(*args: Any, **kwargs: Any) -> Any:
        with _firing.firing(next(pending)):
            return body(*args, **kwargs)

    return call


def guarded(scheduler: Any, *, jobs: Collection[str] | None = None, **guard_options: Any) -> Any:
    """Guard the jobs of an APScheduler 3.x `scheduler` that has not started: every executor
    it has (and the default one it would make) is wrapped in a `GuardedExecutor`. Returns
    the scheduler. Give each job an `id=`, the same on every replica: it names the guard."""
    if BaseExecutor.__module__ == __name__:
        BaseExecutor()  # raises: not APScheduler 3.x
    from apscheduler.schedulers.base import STATE_STOPPED  # type: ignore[import-untyped]

    if getattr(scheduler, "state", None) != STATE_STOPPED:
        raise RuntimeError("guarded(scheduler) must be called before scheduler.start()")
    executors: dict[str, Any] = dict(scheduler._executors)
    executors.setdefault("default", None)
    for alias, executor in executors.items():
        if isinstance(executor, GuardedExecutor):
            continue
        if executor is not None:
            scheduler.remove_executor(alias, shutdown=False)
        scheduler.add_executor(GuardedExecutor(executor, jobs=jobs, **guard_options), alias)
    return scheduler
