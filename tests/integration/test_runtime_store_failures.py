"""When the API server cannot be reached, coordinated jobs fail closed (onStoreUnavailable:
Skip) or, when a job chose RunLocally, run unguarded; everything resumes by itself when the
API server is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.controlplane import ControlPlane
from leasecron.testing.handlers import CapturingHandler, scheduled_job

# These tests kill the API server under open TLS connections. The official client's urllib3
# pool can drop such a connection without closing it, and the garbage collector then reports
# the unclosed socket at a random moment; that is the client's, not a leasecron leak.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:unclosed <ssl.SSLSocket:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning"
    ),
]
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)


@pytest.fixture
def kube(kubeconfig: Path, leasecron_crds: list[str]) -> Iterator[Kube]:
    made = Kube.from_config(kubeconfig=str(kubeconfig), request_timeout=3.0)
    yield made
    made.api_client.rest_client.close()


def unguarded(contexts: list[JobContext]) -> list[JobContext]:
    return [ctx for ctx in contexts if ctx.unguarded]


def test_skip_fails_closed_run_locally_runs_unguarded_and_both_resume_afterwards(
    local_controlplane: ControlPlane, kube: Kube, kube_api: Any, namespace: str
) -> None:
    guarded, open_ = CapturingHandler(), CapturingHandler()
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    scheduler.register("guarded", guarded)
    scheduler.register("open", open_)
    apply_manifests(
        kube_api,
        [scheduled_job("guarded"), scheduled_job("open", onStoreUnavailable="RunLocally")],
        namespace=namespace,
    )
    scheduler.start()
    try:
        assert guarded.wait_calls(2) and open_.wait_calls(2)
        local_controlplane.stop_apiserver()
        try:
            before = open_.calls
            assert open_.wait_calls(before + 1)
            during = guarded.calls  # a run that started before the outage may still show up
            assert open_.wait_calls(open_.calls + 3)
            assert guarded.calls == during
            outage = unguarded(open_.contexts)
            assert len(outage) >= 3 and all(ctx.token is None for ctx in outage)
        finally:
            local_controlplane.start_apiserver()
        resumed = guarded.calls
        assert guarded.wait_calls(resumed + 2, timeout=60)
        after = open_.calls
        assert open_.wait_calls(after + 2, timeout=60)
        assert not any(ctx.unguarded for ctx in open_.contexts[-1:])
    finally:
        scheduler.stop()
