"""once-per-tick jobs against a real API server: one JobRun per tick, failures recorded."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION, jobrun_name
from leasecron.runtime import Tuning
from leasecron.testing.handlers import CapturingHandler, scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)


def create_job(api: Any, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
    )
    return created


def finished(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if (i.get("status") or {}).get("outcome") not in (None, "Running")]


def test_a_once_per_tick_job_gets_one_jobrun_per_tick_with_its_context(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    capture = CapturingHandler()
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register("report", capture)
    job = create_job(kube_api, namespace, scheduled_job("report", schedule="@every 1s"))
    scheduler.start()
    try:
        assert capture.wait_calls(3, timeout=30)
        runs = wait_for_jobruns(
            kube_api, namespace=namespace, until=lambda items: len(finished(items)) >= 3
        )
    finally:
        scheduler.stop()
    contexts: list[JobContext] = capture.contexts[:3]
    # Consecutive ticks of `@every 1s`, each claimed with the next fencing token (one replica:
    # every claim is a new grant on the same Lease, transitions + 1).
    ticks = [ctx.tick for ctx in contexts]
    assert ticks == [ticks[0] + timedelta(seconds=n) for n in range(3)]
    tokens = [ctx.token for ctx in contexts]
    assert tokens[0] is not None and tokens == [tokens[0] + n for n in range(3)]
    by_name = {run["metadata"]["name"]: run for run in runs}
    for ctx in contexts:
        run = by_name[jobrun_name("report", ctx.tick)]
        assert run["status"]["outcome"] == "Succeeded"
        assert run["spec"]["holder"] == scheduler.identity
        assert run["spec"]["fencingToken"] == ctx.token
        assert run["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert run["metadata"]["labels"]["leasecron.dev/job"] == "report"
        assert ctx.idempotency_key.startswith(f"{namespace}/report/")


def test_a_handler_that_raises_gives_a_failed_jobrun_and_the_scheduler_goes_on(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    def boom(ctx: JobContext) -> None:
        raise RuntimeError(f"disk full at {ctx.tick:%H:%M:%S}")

    capture = CapturingHandler(boom)
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register("flaky", capture)
    create_job(kube_api, namespace, scheduled_job("flaky", schedule="@every 1s"))
    scheduler.start()
    try:
        assert capture.wait_calls(2, timeout=30)
        names = {jobrun_name("flaky", ctx.tick) for ctx in capture.contexts[:2]}
        runs = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            until=lambda items: names <= {run["metadata"]["name"] for run in finished(items)},
        )
    finally:
        scheduler.stop()
    failed = [run for run in runs if run["metadata"]["name"] in names]
    assert [run["status"]["outcome"] for run in failed] == ["Failed", "Failed"]
    assert all("RuntimeError: disk full at" in run["status"]["message"] for run in failed)


def test_an_asyncio_app_runs_the_scheduler_with_async_with_and_async_handlers(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    async def app() -> list[JobContext]:
        seen: list[JobContext] = []
        enough = asyncio.Event()
        scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)

        @scheduler.job("ping")
        async def ping(ctx: JobContext) -> None:
            seen.append(ctx)
            if len(seen) >= 2:
                enough.set()

        create_job(kube_api, namespace, scheduled_job("ping", schedule="@every 1s"))
        async with scheduler:
            assert scheduler.running and scheduler.jobs == ("ping",)
            await asyncio.wait_for(enough.wait(), 30)
        assert not scheduler.running
        return seen

    seen = asyncio.run(app())
    assert [ctx.job for ctx in seen[:2]] == ["ping", "ping"]
    assert seen[1].tick - seen[0].tick == timedelta(seconds=1)
