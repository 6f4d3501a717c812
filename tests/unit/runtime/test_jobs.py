"""The job table: which ScheduledJobs this replica runs, and how it reacts to changes."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from datetime import datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
import structlog

from leasecron.kube.watches import WatchEvent
from leasecron.models.specs import ScheduledJob
from leasecron.runtime._invoke import StopReason
from leasecron.runtime._jobs import JobTable, Worker
from leasecron.runtime._registry import HandlerRegistry
from leasecron.runtime._services import Services
from leasecron.testing.handlers import scheduled_job


class FakeWorker:
    def __init__(self, job: ScheduledJob, log: list[tuple[str, str, Any]]) -> None:
        self._job = job
        self._log = log

    @property
    def job(self) -> ScheduledJob:
        return self._job

    def start(self) -> None:
        self._log.append(("start", self._job.name, self._job.spec.bucket.value))

    def update(self, job: ScheduledJob) -> None:
        self._job = job
        self._log.append(("update", job.name, job.spec.suspend))

    async def stop(self, reason: StopReason) -> None:
        await asyncio.sleep(0)
        self._log.append(("stop", self._job.name, reason.value))


def resource(name: str, *, generation: int = 1, uid: str = "u1", **spec: Any) -> dict[str, Any]:
    obj = scheduled_job(name, namespace="ns", **spec)
    obj["metadata"].update(
        {"uid": uid, "generation": generation, "creationTimestamp": "2026-01-01T00:00:00Z"}
    )
    return obj


class Harness:
    def __init__(self, *handlers: str) -> None:
        registry = HandlerRegistry()
        for name in handlers:
            registry.register(name, lambda ctx: None)
        services = SimpleNamespace(group="default", namespace="ns", registry=registry, shards=16)
        self.log: list[tuple[str, str, Any]] = []
        self.table = JobTable(cast(Services, services), make_worker=self._make)

    def _make(self, job: ScheduledJob, created: datetime) -> Worker:
        return FakeWorker(job, self.log)

    async def send(self, kind: str, obj: dict[str, Any]) -> None:
        self.table.on_event(WatchEvent(type=kind, obj=obj, observed_at=0.0))
        await self.table.settled()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_new_job_starts_a_worker_an_update_replans_it_and_a_delete_stops_it() -> None:
    async def scenario() -> list[tuple[str, str, Any]]:
        h = Harness("report")
        await h.send("ADDED", resource("report"))
        await h.send("MODIFIED", resource("report", generation=2, suspend=True))
        await h.send("DELETED", resource("report", generation=2, suspend=True))
        assert h.table.workers == {}
        return h.log

    assert run(scenario()) == [
        ("start", "report", "once-per-tick"),
        ("update", "report", True),
        ("stop", "report", "removed"),
    ]


def test_a_change_of_bucket_or_uid_replaces_the_worker_in_order() -> None:
    async def scenario() -> list[tuple[str, str, Any]]:
        h = Harness("job")
        await h.send("ADDED", resource("job"))
        await h.send("MODIFIED", resource("job", bucket="every-replica"))
        await h.send("MODIFIED", resource("job", bucket="every-replica", uid="u2"))
        return h.log

    assert run(scenario()) == [
        ("start", "job", "once-per-tick"),
        ("stop", "job", "removed"),
        ("start", "job", "every-replica"),
        ("stop", "job", "removed"),
        ("start", "job", "every-replica"),
    ]


def test_a_suspended_single_owner_job_has_no_worker_until_resumed() -> None:
    async def scenario() -> list[tuple[str, str, Any]]:
        h = Harness("owner")
        await h.send("ADDED", resource("owner", bucket="single-owner"))
        await h.send("MODIFIED", resource("owner", bucket="single-owner", suspend=True))
        await h.send("MODIFIED", resource("owner", bucket="single-owner", suspend=False))
        return h.log

    assert run(scenario()) == [
        ("start", "owner", "single-owner"),
        ("stop", "owner", "removed"),
        ("start", "owner", "single-owner"),
    ]


def test_jobs_of_other_groups_are_not_run_nor_reported() -> None:
    async def scenario() -> Harness:
        h = Harness("theirs")
        await h.send("ADDED", resource("theirs", group="other"))
        return h

    h = run(scenario())
    assert h.log == [] and h.table.ignored == {}


def test_an_invalid_spec_is_reported_once_per_generation_and_never_stops_other_jobs() -> None:
    async def scenario() -> Harness:
        h = Harness("good", "bad")
        await h.send("ADDED", resource("good"))
        await h.send("ADDED", resource("bad", schedule="61 * * * *"))
        await h.send("MODIFIED", resource("bad", schedule="61 * * * *"))
        await h.send("MODIFIED", resource("bad", generation=2, schedule="* 25 * * *"))
        return h

    with structlog.testing.capture_logs() as logs:
        h = run(scenario())
    assert h.log == [("start", "good", "once-per-tick")]
    reports = [e for e in logs if e["event"] == "invalid ScheduledJob skipped"]
    assert [e["generation"] for e in reports] == [1, 2]
    assert "spec.schedule" in reports[0]["error"] and "minute" in reports[0]["error"]
    assert "hour" in h.table.ignored["bad"]


def test_a_job_whose_handler_is_not_registered_is_logged_once_and_picked_up_later() -> None:
    async def scenario() -> tuple[Harness, list[tuple[str, str, Any]]]:
        h = Harness()
        await h.send("ADDED", resource("later"))
        await h.send("MODIFIED", resource("later", generation=2))
        before = list(h.log)
        h.table._services.registry.register("later", lambda ctx: None)
        h.table.resync([resource("later", generation=2)])
        await h.table.settled()
        return h, before

    with structlog.testing.capture_logs() as logs:
        h, before = run(scenario())
    assert before == []
    assert h.log == [("start", "later", "once-per-tick")]
    assert len([e for e in logs if "no handler registered" in e["event"]]) == 1
    assert e_level(logs, "no handler registered") == "info"
    assert h.table.ignored == {}


def test_a_job_that_still_carries_the_removed_coordination_field_is_skipped_and_named() -> None:
    async def scenario() -> tuple[list[tuple[str, str, Any]], list[MutableMapping[str, Any]]]:
        h = Harness("led", "other")
        with structlog.testing.capture_logs() as logs:
            await h.send("ADDED", resource("led", coordination="Leader"))
            await h.send("ADDED", resource("other"))
        assert "coordination" in h.table.ignored["led"]
        return h.log, logs

    log, logs = run(scenario())
    assert log == [("start", "other", "once-per-tick")]
    warning = next(e for e in logs if e["event"] == "invalid ScheduledJob skipped")
    assert "spec.coordination" in warning["error"] and "Leader" in warning["error"]


def e_level(logs: list[MutableMapping[str, Any]], prefix: str) -> str:
    return str(next(e["log_level"] for e in logs if e["event"].startswith(prefix)))


def test_a_status_write_neither_validates_the_job_again_nor_updates_its_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator writes a job's status after every run: at 10,000 jobs a minute that is
    10,000 events per replica, which must cost no validation and no re-planning."""
    validated: list[str] = []
    real = ScheduledJob.from_resource

    def counting(obj: dict[str, Any]) -> ScheduledJob:
        validated.append(obj["metadata"]["name"])
        return real(obj)

    monkeypatch.setattr(ScheduledJob, "from_resource", staticmethod(counting))

    async def scenario() -> list[tuple[str, str, Any]]:
        h = Harness("report")
        await h.send("ADDED", resource("report"))
        for token in range(1, 4):
            written = resource("report")
            written["status"] = {"lastRun": {"fencingToken": token}}
            await h.send("MODIFIED", written)
        await h.send("MODIFIED", resource("report", generation=2, suspend=True))
        return h.log

    assert run(scenario()) == [("start", "report", "once-per-tick"), ("update", "report", True)]
    assert validated == ["report", "report"]


def test_a_job_once_converged_leaves_no_task_behind() -> None:
    """Each job's convergence runs in a task of its own; once it is over, the table lets the
    task go (10,000 jobs held 10,000 finished tasks)."""

    async def scenario() -> int:
        h = Harness("report")
        for name in ("a", "b", "c"):
            await h.send("ADDED", resource(name, handler="report"))
        assert len(h.table.workers) == 3
        return len(h.table._converging)

    assert run(scenario()) == 0
