"""A running Scheduler reacts live to its ScheduledJobs: suspend stops a job and resume
restarts it, delete stops it (a running single-owner handler is cancelled) and garbage
collection removes its Lease and JobRuns; jobs of other groups and unregistered handlers are
left alone. A second, always-running job in each test shows the others never stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION, job_lease_name
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests, poll
from leasecron.testing.handlers import CapturingHandler, scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)


@pytest.fixture
def scheduler(kube: Kube, namespace: str) -> Iterator[Scheduler]:
    made = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    yield made
    made.stop()


def lease_exists(api: Any, namespace: str, name: str) -> bool:
    try:
        client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def test_suspend_stops_a_job_and_resume_restarts_it(
    scheduler: Scheduler, kube_api: Any, namespace: str
) -> None:
    job, canary = CapturingHandler(), CapturingHandler()
    scheduler.register("job", job)
    scheduler.register("canary", canary)
    apply_manifests(kube_api, [scheduled_job("job"), scheduled_job("canary")], namespace=namespace)
    scheduler.start()
    assert job.wait_calls(2)
    apply_manifests(kube_api, [scheduled_job("job", suspend=True)], namespace=namespace)
    # Once a canary tick has passed after the suspension, the job gets no tick for 3 more.
    assert canary.wait_calls(canary.calls + 2)
    suspended_at = job.calls
    assert canary.wait_calls(canary.calls + 3)
    assert job.calls == suspended_at
    apply_manifests(kube_api, [scheduled_job("job", suspend=False)], namespace=namespace)
    assert job.wait_calls(suspended_at + 2)


def test_deleting_a_job_stops_it_and_its_jobruns_are_garbage_collected(
    scheduler: Scheduler, kube_api: Any, namespace: str
) -> None:
    job, canary = CapturingHandler(), CapturingHandler()
    scheduler.register("job", job)
    scheduler.register("canary", canary)
    apply_manifests(kube_api, [scheduled_job("job"), scheduled_job("canary")], namespace=namespace)
    scheduler.start()
    assert job.wait_calls(2)
    # A once-per-tick job has no Lease of its own: its group's shard Leases claim its ticks.
    assert not lease_exists(kube_api, namespace, job_lease_name("job"))
    client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, "job", propagation_policy="Background"
    )
    wait_for_jobruns(kube_api, namespace=namespace, job="job", until=lambda items: not items)
    deleted_at = job.calls
    assert canary.wait_calls(canary.calls + 3)
    assert job.calls == deleted_at
    assert not lease_exists(kube_api, namespace, job_lease_name("job"))


def test_deleting_a_single_owner_job_cancels_its_running_handler(
    scheduler: Scheduler, kube_api: Any, namespace: str
) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def sweeper(ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    scheduler.register("sweeper", sweeper)
    election = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}
    manifest = scheduled_job("sweeper", bucket="single-owner", election=election)
    apply_manifests(kube_api, [manifest], namespace=namespace)
    scheduler.start()
    assert started.wait(30)
    runs = wait_for_jobruns(kube_api, namespace=namespace, until=lambda items: len(items) == 1)
    assert runs[0]["status"]["outcome"] == "Running"
    client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, "sweeper"
    )
    assert cancelled.wait(30)


def test_suspending_a_single_owner_job_ends_its_term_and_releases_the_lease(
    scheduler: Scheduler, kube_api: Any, namespace: str
) -> None:
    stopped = threading.Event()

    def poller(ctx: JobContext) -> None:
        while not ctx.wait_lost(0.05):
            pass
        stopped.set()

    scheduler.register("poller", poller)
    election = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}
    manifest = scheduled_job("poller", bucket="single-owner", election=election)
    apply_manifests(kube_api, [manifest], namespace=namespace)
    scheduler.start()
    wait_for_jobruns(kube_api, namespace=namespace, until=lambda items: len(items) == 1)
    suspended = scheduled_job("poller", bucket="single-owner", election=election, suspend=True)
    apply_manifests(kube_api, [suspended], namespace=namespace)
    assert stopped.wait(30)
    runs = wait_for_jobruns(
        kube_api,
        namespace=namespace,
        until=lambda items: items[0].get("status", {}).get("outcome") == "Succeeded",
    )
    assert runs[0]["spec"]["holder"] == scheduler.identity
    leases = client.CoordinationV1Api(kube_api)
    poll(
        lambda: (
            not leases.read_namespaced_lease(
                job_lease_name("poller"), namespace
            ).spec.holder_identity
        ),
        timeout=30,
        what="the Lease released",
    )


def test_jobs_of_other_groups_and_unregistered_handlers_are_left_alone(
    scheduler: Scheduler, kube_api: Any, namespace: str
) -> None:
    mine, theirs = CapturingHandler(), CapturingHandler()
    scheduler.register("mine", mine)
    scheduler.register("theirs", theirs)
    apply_manifests(
        kube_api,
        [
            scheduled_job("mine"),
            scheduled_job("theirs", group="another-group"),
            scheduled_job("nobody-here"),
        ],
        namespace=namespace,
    )
    scheduler.start()
    assert mine.wait_calls(3)
    assert theirs.calls == 0
    assert not lease_exists(kube_api, namespace, job_lease_name("theirs"))
    assert not lease_exists(kube_api, namespace, job_lease_name("nobody-here"))
