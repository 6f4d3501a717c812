"""Run records off the start path (shard claims): one create with the final outcome when the
run ends first, Running then a patch otherwise, retried until written, never dropped, a late
record takes over the operator's Missed one, and the backlog gauge counts them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY
from test_records import FakeJobRuns, operator_missed

from leasecron.kube.errors import Unavailable
from leasecron.kube.jobruns import JobRunStore
from leasecron.models.clocks import FakeClock
from leasecron.models.names import jobrun_name
from leasecron.models.specs import Attempt, JobRun, Outcome, validate_resource
from leasecron.runtime import _deferred
from leasecron.runtime._records import Recorder
from leasecron.testing.handlers import scheduled_job

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
JOB = validate_resource(scheduled_job("report", namespace="ns"))


class CountingJobRuns(FakeJobRuns):
    """FakeJobRuns that counts writes and can refuse the next `failures` of them."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.failures = 0
        self.stored = asyncio.Event()
        """Set once a record is in the store."""

    def _write(self, what: str) -> None:
        if self.failures:
            self.failures -= 1
            raise Unavailable("no store", reason="Unavailable")
        self.writes.append(what)

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._write(f"create {body['status']['outcome']}")
        created = await super().create(namespace=namespace, body=body)
        self.stored.set()
        return created

    async def patch_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self._write(f"patch {patch['status']['outcome']}")
        return await super().patch_status(namespace=namespace, name=name, patch=patch)


def recorder(store: FakeJobRuns) -> Recorder:
    return Recorder(jobruns=cast(JobRunStore, store), namespace="ns", clock=FakeClock(start=TICK))


def test_a_run_that_ends_before_its_record_goes_out_is_written_once_with_its_outcome() -> None:
    store = CountingJobRuns()

    async def scenario() -> None:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=7, now=TICK)
        assert run is not None
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        assert await rec.flush(timeout=5)

    asyncio.run(scenario())
    assert store.writes == ["create Succeeded"]
    [record] = store.items.values()
    assert record["spec"]["fencingToken"] == 7 and record["status"]["outcome"] == "Succeeded"


def test_a_run_still_going_is_recorded_running_then_patched_when_it_ends() -> None:
    store = CountingJobRuns()

    async def scenario() -> None:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=7, now=TICK)
        assert run is not None
        await asyncio.wait_for(store.stored.wait(), 5)
        assert store.writes == ["create Running"] and rec.backlog == 1
        later = TICK + timedelta(seconds=1)
        rec.deferred.finish(run, outcome=Outcome.FAILED, message="boom", now=later)
        assert await rec.flush(timeout=5)
        assert rec.backlog == 0

    asyncio.run(scenario())
    assert store.writes == ["create Running", "patch Failed"]


def test_records_that_cannot_be_written_are_retried_until_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_deferred, "_RETRY_FIRST", 0.001)
    store = CountingJobRuns()
    store.failures = 3

    async def scenario() -> float:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=1, now=TICK)
        assert run is not None
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        await asyncio.sleep(0)
        waiting = REGISTRY.get_sample_value("leasecron_record_backlog")
        assert await rec.flush(timeout=10)
        return float(waiting or 0)

    assert asyncio.run(scenario()) == 1.0
    assert store.writes == ["create Succeeded"] and store.failures == 0


def test_a_late_record_takes_over_the_missed_one_the_operator_wrote() -> None:
    store = CountingJobRuns()

    async def scenario() -> None:
        rec = recorder(store)
        await store.create(namespace="ns", body=operator_missed(JOB.name))
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=3, now=TICK)
        assert run is not None
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        assert await rec.flush(timeout=5)

    asyncio.run(scenario())
    [record] = store.items.values()
    assert record["status"]["outcome"] == "Succeeded" and record["spec"]["holder"] == "a"


def test_a_full_queue_sends_the_record_back_to_the_start_path() -> None:
    store = CountingJobRuns()
    store.failures = 10**6  # nothing is written while the queue fills

    async def scenario() -> list[bool]:
        rec = recorder(store)
        limit, _deferred.DEFERRED_LIMIT = _deferred.DEFERRED_LIMIT, 2
        try:
            queued = [
                rec.deferred.start(
                    JOB, tick=TICK + timedelta(seconds=k), holder="a", token=k, now=TICK
                )
                for k in range(3)
            ]
        finally:
            _deferred.DEFERRED_LIMIT = limit
            await rec.close()
        return [q is not None for q in queued]

    assert asyncio.run(scenario()) == [True, True, False]


class LandingThenTimingOut(CountingJobRuns):
    """The first create lands, but its caller only sees a timeout (no reply in time)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts = 1

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        created = await super().create(namespace=namespace, body=body)
        if self.timeouts:
            self.timeouts -= 1
            raise TimeoutError("no reply in time")
        return created


def test_a_record_whose_create_timed_out_but_landed_still_gets_its_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_deferred, "_RETRY_FIRST", 0.001)
    store = LandingThenTimingOut()

    async def scenario() -> None:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=7, now=TICK)
        assert run is not None
        await asyncio.wait_for(store.stored.wait(), 5)  # landed; its caller saw a timeout
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        assert await rec.flush(timeout=5)

    asyncio.run(scenario())
    [record] = store.items.values()
    assert record["status"]["outcome"] == "Succeeded", store.writes


def test_a_record_whose_job_was_deleted_meanwhile_is_not_retried_forever() -> None:
    store = CountingJobRuns()

    async def scenario() -> bool:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=7, now=TICK)
        assert run is not None
        await asyncio.wait_for(store.stored.wait(), 5)  # the Running record went out
        store.items.clear()  # the ScheduledJob was deleted, its JobRuns with it
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        return await rec.flush(timeout=3) and rec.backlog == 0

    assert asyncio.run(scenario())


class SlowProgressJobRuns(CountingJobRuns):
    """Holds a progress patch (outcome Running) on the wire until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.on_wire = asyncio.Event()
        self.release = asyncio.Event()

    async def patch_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        if patch["status"]["outcome"] == "Running":
            self.on_wire.set()
            await self.release.wait()
        return await super().patch_status(namespace=namespace, name=name, patch=patch)


def test_a_run_that_ends_while_its_progress_patch_is_on_the_wire_is_written_final_last() -> None:
    store = SlowProgressJobRuns()
    failed = Attempt(start=TICK, end=TICK, outcome=Outcome.FAILED, message="boom")

    async def scenario() -> None:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=7, now=TICK)
        assert run is not None
        assert await rec.deferred.written(run, timeout=5)
        rec.deferred.progress(run, attempts=(failed,), message="retrying")
        await store.on_wire.wait()
        later = TICK + timedelta(minutes=1)  # another run's record, so more writers go
        assert rec.deferred.start(JOB, tick=later, holder="a", token=8, now=later) is not None
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        await asyncio.sleep(0.2)  # a second writer, if any, takes the final patch now
        store.release.set()
        assert await rec.flush(timeout=5)

    asyncio.run(scenario())
    ours = [w for w in store.writes if w != "create Running"]
    assert ours == ["patch Running", "patch Succeeded"]
    assert store.items[jobrun_name("report", TICK)]["status"]["outcome"] == "Succeeded"


def test_each_record_write_waits_until_the_run_starts_queued_before_it_are_through() -> None:
    """A large instant's starts come first: a writer asks `starts_idle` (the pacer's, with
    its bound) before each write and writes nothing until it returns."""
    store = CountingJobRuns()

    async def scenario() -> tuple[list[float], list[str], list[str]]:
        rec = recorder(store)
        asked: list[float] = []
        waiting, through = asyncio.Event(), asyncio.Event()

        async def starts_idle(bound: float) -> None:
            asked.append(bound)
            waiting.set()
            await through.wait()

        rec.deferred.starts_idle = starts_idle
        assert rec.deferred.start(JOB, tick=TICK, holder="a", token=1, now=TICK) is not None
        await asyncio.wait_for(waiting.wait(), 5)  # the writer is held in starts_idle now
        held = list(store.writes)
        through.set()
        assert await rec.flush(timeout=5)
        return asked, held, list(store.writes)

    asked, held, written = asyncio.run(scenario())
    assert asked[0] == _deferred._YIELD_MAX_S
    assert held == [] and written == ["create Running"]


def test_a_records_bodies_are_made_by_its_writer_not_where_the_run_starts_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thousands of runs start and end on one instant: the JobRun models of their records
    are made off that path, when a writer takes them up."""
    store = CountingJobRuns()
    made: list[str] = []
    for_tick, finish = JobRun.for_tick, JobRun.finish

    def counted_for_tick(**kwargs: Any) -> JobRun:
        made.append("for_tick")
        return for_tick(**kwargs)

    def counted_finish(self: JobRun, **kwargs: Any) -> JobRun:
        made.append("finish")
        return finish(self, **kwargs)

    monkeypatch.setattr(JobRun, "for_tick", staticmethod(counted_for_tick))
    monkeypatch.setattr(JobRun, "finish", counted_finish)

    async def scenario() -> tuple[list[str], list[str]]:
        rec = recorder(store)
        run = rec.deferred.start(JOB, tick=TICK, holder="a", token=7, now=TICK)
        assert run is not None
        rec.deferred.finish(run, outcome=Outcome.SUCCEEDED, message="", now=TICK)
        on_the_run_path = list(made)
        assert await rec.flush(timeout=5)
        return on_the_run_path, list(made)

    on_the_run_path, after = asyncio.run(scenario())
    assert on_the_run_path == []
    assert after == ["for_tick", "finish"]
    [record] = store.items.values()
    assert record["spec"]["start"] is not None and record["status"]["outcome"] == "Succeeded"
