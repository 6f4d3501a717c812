"""The tick timer's queue (`_shard_timer.ShardTimer`): a wake-up plans the jobs that are new,
changed or just due, not every job of the replica (a replica taking up 10,000 jobs was woken
once per batch of them and went through all of them each time: seconds of its loop), and a
job's queued tick is dropped once the job is planned again, replaced or removed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from leasecron.models.clocks import FakeClock
from leasecron.models.groups import GroupState
from leasecron.models.names import ANNOTATION_CLAIMER
from leasecron.models.specs import ScheduledJob
from leasecron.runtime._invoke import StopReason
from leasecron.runtime._shard_jobs import JobEntry, ShardJobs
from leasecron.runtime._shard_timer import ShardTimer

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def job(name: str, schedule: str = "* * * * *") -> ScheduledJob:
    spec: dict[str, Any] = {"bucket": "once-per-tick", "schedule": schedule, "group": "g"}
    return ScheduledJob.from_resource(
        {
            "apiVersion": "leasecron.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": spec,
        }
    )


def timer() -> tuple[ShardTimer, ShardJobs]:
    services: Any = SimpleNamespace(group="g", grace_period=1.0, clock=FakeClock(start=NOW))
    jobs = ShardJobs(services)
    nothing: Any = None
    return ShardTimer(services, jobs, nothing, nothing, nothing, spawn=nothing), jobs


def plan(clock: ShardTimer) -> None:
    asyncio.run(clock._plan_changed())


def names(entries: list[JobEntry]) -> set[str]:
    return {e.job.name for e in entries}


def test_a_wake_up_plans_the_jobs_that_changed_not_all_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planned: list[str] = []
    real = ShardTimer._plan

    def counted(self: ShardTimer, entry: JobEntry) -> Any:
        planned.append(entry.job.name)
        return real(self, entry)

    monkeypatch.setattr(ShardTimer, "_plan", counted)
    clock, jobs = timer()
    for index in range(500):  # one schedule, created at different times: one plan each
        jobs.add(job(f"job-{index}"), created=NOW - timedelta(seconds=index))
    plan(clock)
    first = len(planned)
    jobs.update(job("job-7", "*/5 * * * *"))
    jobs.add(job("new"), created=NOW)
    plan(clock)

    assert first == 500
    assert planned[first:] == ["job-7", "new"]


def test_the_soonest_tick_and_the_jobs_due_by_it_come_from_the_queue() -> None:
    clock, jobs = timer()
    jobs.add(job("minutely"), created=NOW)
    jobs.add(job("five", "*/5 * * * *"), created=NOW)
    plan(clock)

    soonest = clock._soonest()
    due = clock._take_due(NOW + timedelta(minutes=1))
    later = clock._take_due(NOW + timedelta(minutes=5))

    assert soonest == NOW + timedelta(minutes=1)
    assert names(due) == {"minutely"}
    assert names(later) == {"five"}


def test_a_job_replanned_replaced_or_removed_leaves_no_tick_in_the_queue() -> None:
    clock, jobs = timer()
    for name in ("changed", "replaced", "removed", "kept"):
        jobs.add(job(name), created=NOW)
    plan(clock)
    jobs.update(job("changed", "*/5 * * * *"))  # planned again: its minutely tick is gone
    jobs.put(JobEntry(job=job("replaced"), after=NOW, not_before=NOW))
    asyncio.run(jobs.remove("removed", StopReason.REMOVED))
    plan(clock)

    due = clock._take_due(NOW + timedelta(minutes=1))
    after = clock._take_due(NOW + timedelta(minutes=5))

    assert sorted(e.job.name for e in due) == ["kept", "replaced"]
    assert names(after) == {"changed"}
    assert clock._soonest() is None


def test_jobs_taken_due_and_put_back_are_due_again() -> None:
    """The jobs changed between preparing an instant and launching it: the ones taken are
    queued again and planned with the rest."""
    clock, jobs = timer()
    jobs.add(job("a"), created=NOW)
    plan(clock)
    taken = clock._take_due(NOW + timedelta(minutes=1))
    for entry in taken:
        clock._queue(entry)

    assert names(clock._take_due(NOW + timedelta(minutes=1))) == {"a"}


def test_planning_many_jobs_lets_the_loop_turn_so_the_claims_launched_go_out_meanwhile() -> None:
    """The next ticks of an instant's jobs are planned right after its claims are launched; a
    replica of 10,000 jobs took 60-110 ms at it, and its claim writes waited behind."""
    clock, jobs = timer()
    for index in range(2000):
        jobs.add(job(f"job-{index}"), created=NOW)
    queued_when_the_other_task_ran: list[int] = []

    async def both() -> None:
        async def other() -> None:
            queued_when_the_other_task_ran.append(len(clock._queued))

        planning = asyncio.ensure_future(clock._plan_changed())
        await asyncio.gather(planning, other())

    asyncio.run(both())

    assert len(clock._queued) == 2000
    assert 0 < queued_when_the_other_task_ran[0] < 2000


def test_a_shard_is_placed_by_its_claimer_only_once_its_instant_has_settled() -> None:
    """Every replica must place from the same claimers: the claim of an instant a second
    before may still be in flight, and views differ then, so only a claim three seconds or
    more before the instant placed counts."""
    instant = NOW + timedelta(minutes=1)

    def seen(tick: datetime | None) -> Any:
        annotations = {ANNOTATION_CLAIMER: "replica-a"}
        record = SimpleNamespace(tick=tick)
        return SimpleNamespace(
            obj={"metadata": {"annotations": annotations}},
            observation=SimpleNamespace(record=record),
        )

    clock, _ = timer()
    clock._services.namespace = "ns"
    views: dict[str, Any] = {
        "settled": seen(instant - timedelta(seconds=3)),
        "in-flight": seen(instant - timedelta(seconds=1)),
        "never-claimed": seen(None),
    }
    clock._group = SimpleNamespace(view=SimpleNamespace(seen=lambda ns, name: views.get(name)))

    assert clock._claimer("settled", instant) == "replica-a"
    assert clock._claimer("in-flight", instant) is None
    assert clock._claimer("never-claimed", instant) is None
    assert clock._claimer("unknown", instant) is None


class _Launched(Exception):
    """Ends the timer's loop at its wait before the launch."""


@pytest.mark.parametrize(("jobs", "lead"), [(1, 0.01001), (3000, 0.04)])
def test_an_instant_is_launched_earlier_the_more_jobs_are_due_then(
    monkeypatch: pytest.MonkeyPatch, jobs: int, lead: float
) -> None:
    """10 ms before the instant and 10 µs more per job due (at most half a second):
    launching 10,000 jobs' claims took 27-52 ms on a busy machine, which a 10 ms lead put
    past the instant."""
    start = NOW + timedelta(seconds=59.2)  # 0.8 s before the minute's tick
    nothing: Any = None
    services: Any = SimpleNamespace(
        group="g",
        namespace="ns",
        identity="me",
        clock=FakeClock(start=start),
        registry=SimpleNamespace(name_set=lambda: frozenset()),
        membership=SimpleNamespace(members=lambda: ["me"], members_with=lambda *a, **k: ["me"]),
    )
    table = ShardJobs(services)
    for index in range(jobs):
        table.add(job(f"job-{index}"), created=start)
    group: Any = SimpleNamespace(
        state=lambda: GroupState(shards=4), view=SimpleNamespace(seen=lambda ns, name: None)
    )
    clock = ShardTimer(services, table, group, nothing, nothing, spawn=nothing)
    waited: list[float] = []

    async def wait_for(awaitable: Any, timeout: float) -> None:  # noqa: ASYNC109
        awaitable.close()
        waited.append(timeout)
        raise _Launched

    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    with pytest.raises(_Launched):
        asyncio.run(clock._loop())

    assert waited == [pytest.approx(0.8 - lead)]
