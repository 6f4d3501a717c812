"""The example web applications (examples/frameworks/) under their real servers, as two pods
against the real API server: each tick's effect once, one Scheduler per pod under several
workers, and SIGTERM handled by the server, whose shutdown stops the Scheduler and releases
its Leases."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from _framework_apps import (
    GROUP,
    lease_holder,
    members,
    running_pods,
    ticks_per_tick,
    wait_for_ticks,
)
from operator_helpers import apply_job

from leasecron.models.identity import identity_base
from leasecron.models.names import job_lease_name
from leasecron.testing import poll

pytestmark = pytest.mark.integration
ELECTION = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}
SERVER_SIGTERM = {
    "fastapi": "uvicorn.server.Server.handle_exit",
    "flask": "gunicorn.workers.base.Worker.handle_exit",
    "django": "gunicorn.workers.base.Worker.handle_exit",
}
EXIT_CODE = {"fastapi": -signal.SIGTERM, "flask": 0, "django": 0}
"""After a graceful shutdown uvicorn raises the signal again (so its parent sees it); gunicorn
exits 0."""
SHUTDOWN_LINE = {
    "fastapi": "Application shutdown complete",
    "flask": "Shutting down: Master",
    "django": "Shutting down: Master",
}


def apply_jobs(api: Any, namespace: str) -> None:
    apply_job(api, namespace, "send-invoices", group=GROUP, schedule="@every 1s")
    apply_job(api, namespace, "queue-poller", bucket="single-owner", group=GROUP, election=ELECTION)


def running_status(pod: Any) -> dict[str, Any] | None:
    status = pod.status()
    return status if status and status["running"] else None


@pytest.mark.parametrize("server", ["fastapi", "flask", "django"])
def test_two_pods_of_a_web_app_run_each_tick_once_and_release_their_leases_on_sigterm(
    server: str, kube_api: Any, kubeconfig: Path, namespace: str, leasecron_crds: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    apply_jobs(kube_api, namespace)
    pods = running_pods(
        server, ["pod-a", "pod-b"], kubeconfig=kubeconfig, namespace=namespace, tmp_path=tmp_path
    )
    with pods as (a, b):
        for pod in (a, b):
            status = poll(lambda p=pod: running_status(p), timeout=60, what=f"{pod.name} running")
            # The server's own SIGTERM handler is in place: leasecron installed none.
            assert status["sigterm"] == SERVER_SIGTERM[server]
        first = len(wait_for_ticks(tmp_path, 1))
        counts = wait_for_ticks(tmp_path, first + 4)
        assert set(counts.values()) == {1}, f"ticks run more than once: {counts}"
        lease = job_lease_name("queue-poller")
        owner = poll(lambda: lease_holder(kube_api, namespace, lease), timeout=30, what="owned")
        owning, standby = (a, b) if identity_base(owner) == "pod-a" else (b, a)

        assert standby.terminate() == EXIT_CODE[server]
        assert owning.process.alive()
        assert owning.terminate() == EXIT_CODE[server]
        # Stopped through the server's lifecycle: the owner released its Lease and both
        # deleted their member Leases on the way out (a kill would leave them to expire).
        assert lease_holder(kube_api, namespace, lease) == ""
        assert members(kube_api, namespace) == []
        for pod in (a, b):
            assert SHUTDOWN_LINE[server] in pod.process.log_path.read_text()
    assert set(ticks_per_tick(tmp_path).values()) == {1}


@pytest.mark.parametrize("server", ["flask", "fastapi"])
def test_one_worker_of_a_pod_runs_the_scheduler_and_another_takes_over_when_it_is_killed(
    server: str, kube_api: Any, kubeconfig: Path, namespace: str, leasecron_crds: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    apply_jobs(kube_api, namespace)
    pods = running_pods(
        server,
        ["pod-m"],
        kubeconfig=kubeconfig,
        namespace=namespace,
        tmp_path=tmp_path,
        workers=3,
        env={"LEASECRON_ONE_PER_POD": "1"},
    )
    with pods as (pod,):
        poll(lambda: len(pod.contenders()) >= 3, timeout=60, what="3 workers contending")
        counts = wait_for_ticks(tmp_path, len(wait_for_ticks(tmp_path, 1)) + 3)
        pid, identity = poll(pod.lock_holder, timeout=10, what="the lock held")
        assert members(kube_api, namespace) == [identity]
        assert set(counts.values()) == {1}

        os.kill(pid, signal.SIGKILL)
        _, new_identity = poll(
            lambda: (held := pod.lock_holder()) and held[0] != pid and held,
            timeout=30,
            what="another worker holding the lock",
        )
        assert identity_base(new_identity) == "pod-m" and new_identity != identity
        poll(
            lambda: new_identity in members(kube_api, namespace),
            timeout=30,
            what="the new holder's Scheduler running",
        )
        wait_for_ticks(tmp_path, len(ticks_per_tick(tmp_path)) + 2)
        # The killed worker's member Lease is left to expire; one Scheduler runs besides it.
        assert [m for m in members(kube_api, namespace) if m != identity] == [new_identity]
        assert set(ticks_per_tick(tmp_path).values()) == {1}
        # The supervisors (gunicorn's master, uvicorn's) exit 0 once their workers stopped;
        # the worker holding the lock stopped its Scheduler on the way out.
        assert pod.terminate() == 0
        assert new_identity not in members(kube_api, namespace)
        # Two Schedulers over the pod's life: the first holder's and its successor's; none in
        # a worker that took the released lock while the pod shut down.
        assert pod.process.log_path.read_text().count("pod lock taken") == 2


def test_django_runs_one_scheduler_in_runservers_serving_child_and_one_in_its_own_command(
    kube_api: Any, kubeconfig: Path, namespace: str, leasecron_crds: Any, tmp_path: Path
) -> None:
    apply_jobs(kube_api, namespace)
    where = {"kubeconfig": kubeconfig, "namespace": namespace, "tmp_path": tmp_path}
    with (
        running_pods("runserver", ["pod-r"], **where) as (served,),
        running_pods("command", ["pod-c"], **where) as (command,),
    ):
        poll(lambda: running_status(served), timeout=60, what="runserver's child running")
        poll(
            lambda: (
                sorted(identity_base(m) for m in members(kube_api, namespace)) == ["pod-c", "pod-r"]
            ),
            timeout=60,
            what="the command's Scheduler running",
        )
        wait_for_ticks(tmp_path, len(wait_for_ticks(tmp_path, 1)) + 4)
        # Not one more in the autoreloader's parent, nor in the command's ready().
        assert sorted(identity_base(m) for m in members(kube_api, namespace)) == ["pod-c", "pod-r"]
        assert set(ticks_per_tick(tmp_path).values()) == {1}

        assert command.terminate() == 0  # run_forever: the command's own SIGTERM handling
        assert [identity_base(m) for m in members(kube_api, namespace)] == ["pod-r"]
