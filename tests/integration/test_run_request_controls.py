"""A requested run (`leasecron run`) against the real API server gets the job's spec.timeout
and spec.retry like a scheduled tick, through the same attempt path: its attempts in the
request's status, one token, and a context that says it was asked for."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from kubernetes import client

from leasecron import JobContext, Scheduler
from leasecron.cli import main
from leasecron.kube.clients import Kube
from leasecron.models.names import GROUP, JOBRUN_PLURAL, SCHEDULEDJOB_PLURAL, VERSION
from leasecron.models.specs import Trigger
from leasecron.runtime import Tuning
from leasecron.testing.handlers import CapturingHandler, scheduled_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("leasecron_crds")]
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)
YEARLY = "0 0 1 1 *"


@pytest.fixture
def replica(kubeconfig: Path, namespace: str) -> Iterator[tuple[Scheduler, CapturingHandler]]:
    """One running Scheduler (its own client) with an async handler `work` whose body a
    test sets as `capture.inner`."""
    kube = Kube.from_config(kubeconfig=str(kubeconfig))
    capture = CapturingHandler()
    scheduler = Scheduler(
        namespace=namespace, kube=kube, tuning=FAST, grace_period=5, identity="r0"
    )
    scheduler.register("work", capture.run_async)
    try:
        yield scheduler, capture
    finally:
        if scheduler.running:
            scheduler.stop()
        kube.api_client.rest_client.close()


def create_job(api: Any, namespace: str, name: str, **spec: Any) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, scheduled_job(name, **spec)
    )


def run_and_wait(kubeconfig: Path, namespace: str, job: str) -> tuple[Result, str]:
    options = ["--wait", "--timeout", "40", "--kubeconfig", str(kubeconfig), "-n", namespace]
    result = CliRunner().invoke(main, ["run", job, *options])
    lines = [line for line in result.stdout.splitlines() if line.startswith("jobrun/")]
    assert lines, result.output
    return result, lines[0].split()[0].removeprefix("jobrun/")


def jobrun(api: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL, name
    )
    return found


async def hang(ctx: JobContext) -> None:
    await asyncio.sleep(3600)


def fail_once(ctx: JobContext) -> None:
    if ctx.attempt == 1:
        raise RuntimeError("attempt 1 failed")


def test_a_requested_run_past_its_timeout_is_retried_and_ends_timed_out_after_two_attempts(
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    replica: tuple[Scheduler, CapturingHandler],
) -> None:
    scheduler, capture = replica
    create_job(
        kube_api,
        namespace,
        "slow",
        handler="work",
        schedule=YEARLY,
        timeout="1s",
        retry={"limit": 1, "backoff": "1s"},
    )
    capture.inner = hang
    scheduler.start()
    result, name = run_and_wait(kubeconfig, namespace, "slow")
    assert result.exit_code != 0, result.output
    run = jobrun(kube_api, namespace, name)
    status = run["status"]
    assert status["outcome"] == "TimedOut"
    assert [a["outcome"] for a in status["attempts"]] == ["TimedOut", "TimedOut"]
    assert status["message"].endswith("(attempt 2 of 2)")
    assert [ctx.attempt for ctx in capture.contexts] == [1, 2]
    assert {ctx.token for ctx in capture.contexts} == {run["spec"]["fencingToken"]}


def test_a_requested_run_that_fails_once_succeeds_on_its_retry_and_knows_it_was_asked_for(
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    replica: tuple[Scheduler, CapturingHandler],
) -> None:
    scheduler, capture = replica
    create_job(
        kube_api,
        namespace,
        "flaky",
        handler="work",
        schedule=YEARLY,
        retry={"limit": 1, "backoff": "1s"},
    )
    capture.inner = fail_once
    scheduler.start()
    result, name = run_and_wait(kubeconfig, namespace, "flaky")
    assert result.exit_code == 0, result.output
    run = jobrun(kube_api, namespace, name)
    status = run["status"]
    assert status["outcome"] == "Succeeded"
    assert [a["outcome"] for a in status["attempts"]] == ["Failed", "Succeeded"]
    assert status["attempts"][0]["message"] == "RuntimeError: attempt 1 failed"
    assert [ctx.attempt for ctx in capture.contexts] == [1, 2]
    assert {ctx.trigger for ctx in capture.contexts} == {Trigger.MANUAL}
    assert {ctx.requested_by for ctx in capture.contexts} == {run["spec"]["requestedBy"]}
    assert all(ctx.requested_by for ctx in capture.contexts)
    assert {ctx.token for ctx in capture.contexts} == {run["spec"]["fencingToken"]}
