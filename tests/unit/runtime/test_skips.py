"""Skips (`Services.skip_all`): a shard instant another replica claimed is a skip of each of
its jobs on every other replica (N-1 of N), thousands at once on a large group: counted per
job and reason, logged once at debug for the instant rather than once per job."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from structlog.testing import capture_logs

from leasecron._metrics import SKIPS
from leasecron.kube.jobruns import JobRunStore
from leasecron.models.clocks import FakeClock
from leasecron.models.specs import ScheduledJob
from leasecron.runtime._records import Recorder
from leasecron.runtime._registry import HandlerRegistry
from leasecron.runtime._services import Services, Tuning
from leasecron.testing.handlers import scheduled_job

TICK = datetime(2026, 1, 1, tzinfo=UTC)


def services() -> Services:
    clock = FakeClock(start=TICK)
    nothing: Any = None
    recorder = Recorder(jobruns=JobRunStore(nothing), namespace="skips", clock=clock)
    return Services(
        namespace="skips",
        group="g",
        identity="me",
        clock=clock,
        kube=nothing,
        registry=HandlerRegistry(),
        executor=ThreadPoolExecutor(1),
        recorder=recorder,
        membership=nothing,
        lease_cache=None,
        grace_period=1.0,
        tuning=Tuning(),
    )


def count(job: str, reason: str) -> float:
    return SKIPS.labels("skips", job, reason).value


def test_the_skips_of_a_shard_instant_are_counted_per_job_and_logged_once() -> None:
    jobs = [
        ScheduledJob.from_resource(scheduled_job(f"report-{i}", namespace="skips"))
        for i in range(3)
    ]
    before = [count(job.name, "taken") for job in jobs]

    with capture_logs() as logs:
        services().skip_all(jobs, "taken", tick=TICK)

    assert [count(job.name, "taken") for job in jobs] == [b + 1 for b in before]
    skipped = [e for e in logs if e["event"] == "tick skipped"]
    assert len(skipped) == 1
    assert skipped[0]["jobs"] == 3
    assert skipped[0]["reason"] == "taken"
