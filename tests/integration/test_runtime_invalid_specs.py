"""Invalid ScheduledJobs: what the API server can check it refuses (CRD schema and CEL);
what it cannot (cron syntax, zone names, absurd durations) the scheduler reports with a
message naming the field, once per generation, and skips, while its other jobs run on."""

from __future__ import annotations

import time
from typing import Any

import pytest
import structlog
from kubernetes import client

from leasecron import Scheduler
from leasecron.kube.clients import Kube
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.handlers import CapturingHandler, scheduled_job

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"bucket": "sometimes"}, "spec.bucket"),
        ({"bucket": "once-per-tick"}, "spec.schedule"),
        ({"lock": {"atMostFor": "1m", "atLeastFor": "5m"}}, "spec.lock.atLeastFor"),
        ({"lock": {"atMostFor": "forever"}}, "spec.lock.atMostFor"),
        ({"election": {"leaseDuration": "5s", "renewDeadline": "10s"}}, "renewDeadline"),
    ],
    ids=[
        "unknown-bucket",
        "missing-schedule",
        "at-least-over-at-most",
        "not-a-duration",
        "renew-over-lease",
    ],
)
def test_the_api_server_refuses_what_the_crd_can_check(
    kube_api: Any, namespace: str, leasecron_crds: list[str], spec: dict[str, Any], named: str
) -> None:
    manifest = scheduled_job("bad", schedule="@every 1s")
    if spec.get("bucket") == "once-per-tick":
        manifest["spec"].pop("schedule")
    manifest["spec"].update(spec)
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", manifest
        )
    assert refused.value.status == 422
    assert named in str(refused.value.body)


@pytest.mark.parametrize("value", ["Leader", "Anything"])
def test_the_api_server_refuses_the_removed_coordination_field_naming_field_and_value(
    kube_api: Any, namespace: str, leasecron_crds: list[str], value: str
) -> None:
    manifest = scheduled_job("old", schedule="@every 1s", coordination=value)
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", manifest
        )
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert f"spec.coordination ({value}) was removed" in body
    assert "claimed through its group" in body


def test_the_api_server_accepts_coordination_lock_the_old_default(
    kube_api: Any, namespace: str, leasecron_crds: list[str]
) -> None:
    manifest = scheduled_job("kept", schedule="@every 1s", coordination="Lock")
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", manifest
    )


def test_the_api_server_refuses_an_election_margin_under_one_second_naming_both_values(
    kube_api: Any, namespace: str, leasecron_crds: list[str]
) -> None:
    election = {"leaseDuration": "3s", "renewDeadline": "2500ms"}
    manifest = scheduled_job("tight", bucket="single-owner", election=election)
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", manifest
        )
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "spec.election.renewDeadline" in body
    assert "renewDeadline (2500ms) must be at least 1s less than leaseDuration (3s)" in body
    assert "client-go" in body


def test_specs_only_the_scheduler_can_check_are_reported_by_field_and_skipped(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    bad = {
        "bad-cron": scheduled_job("bad-cron", schedule="61 * * * *"),
        "bad-zone": scheduled_job("bad-zone", timeZone="Mars/Olympus_Mons"),
        "absurd": scheduled_job("absurd", lock={"atMostFor": "99999h"}),
    }
    handlers = {name: CapturingHandler() for name in [*bad, "canary"]}
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    for name, handler in handlers.items():
        scheduler.register(name, handler)
    apply_manifests(kube_api, [*bad.values(), scheduled_job("canary")], namespace=namespace)
    with structlog.testing.capture_logs() as logs:
        scheduler.start()
        try:
            assert handlers["canary"].wait_calls(2)
            # A metadata-only change (same generation) is not reported again; a new spec is.
            label = {"metadata": {"labels": {"touched": "yes"}}}
            objects = client.CustomObjectsApi(kube_api)
            objects.patch_namespaced_custom_object(
                "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", "bad-cron", label
            )
            respec = {"spec": {"schedule": "* 25 * * *"}}
            objects.patch_namespaced_custom_object(
                "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", "bad-cron", respec
            )
            deadline = time.monotonic() + 30
            while "hour" not in scheduler.ignored.get("bad-cron", ""):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert handlers["canary"].wait_calls(handlers["canary"].calls + 2)
            ignored = scheduler.ignored
        finally:
            scheduler.stop()
    assert all(handlers[name].calls == 0 for name in bad)
    assert "spec.schedule" in ignored["bad-cron"] and "hour" in ignored["bad-cron"]
    assert "spec.timeZone" in ignored["bad-zone"]
    assert "spec.lock.atMostFor" in ignored["absurd"]
    reports = [e for e in logs if e["event"] == "invalid ScheduledJob skipped"]
    per_job = {name: [e for e in reports if e["job"] == name] for name in bad}
    assert [len(per_job[name]) for name in bad] == [2, 1, 1]
    assert "minute" in per_job["bad-cron"][0]["error"]
    assert all(e["log_level"] == "warning" for e in reports)
