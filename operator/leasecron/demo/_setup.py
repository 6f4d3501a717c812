"""The demo's cluster side: a throwaway local control plane (or the cluster of a given
kubeconfig), a namespace of its own with the CRDs and the three ScheduledJobs applied, and
the two reads the live view needs (Lease holders, JobRun count).

Owns talking to the cluster from the driver, with the admin credentials of the kubeconfig.
The namespace is new for every run (`leasecron-demo-<4 hex>`), so a previous run's Leases
and JobRuns never leak into the figures; on a given cluster it is deleted at the end, the
local control plane is simply thrown away.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from leasecron.demo._jobs import ONCE_PER_TICK_JOB, scheduled_jobs
from leasecron.demo._view import LeaseView
from leasecron.models.crds import all_crds
from leasecron.models.names import GROUP, JOBRUN_PLURAL, LABEL_JOB, VERSION, job_lease_name

Say = Callable[[str], None]
_PROGRESS_SECONDS = 2.0


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Where the demo runs: kubeconfig, server URL and whether it was started for the demo."""

    kubeconfig: Path
    server: str
    local: bool


@contextmanager
def cluster(*, kubeconfig: Path | None, say: Say) -> Iterator[Cluster]:
    """The given cluster, or a local control plane started (with progress lines) and stopped."""
    if kubeconfig is not None:
        with _api(kubeconfig) as api:
            server = str(api.configuration.host)
        say(f"[demo] using the cluster of {kubeconfig} ({server})")
        yield Cluster(kubeconfig=kubeconfig, server=server, local=False)
        return
    from leasecron.testing import ControlPlane

    plane = ControlPlane()
    say("[demo] starting a local control plane (etcd, kube-apiserver, kube-controller-manager)")
    with _ticking(say, what="control plane"):
        plane.start()
    try:
        say(
            f"[demo] control plane {plane.version} ready at {plane.server} "
            f"in {plane.startup_seconds:.1f}s"
        )
        yield Cluster(kubeconfig=plane.kubeconfig, server=plane.server, local=True)
    finally:
        say("[demo] stopping the control plane")
        plane.stop()


@contextmanager
def _ticking(say: Say, *, what: str) -> Iterator[None]:
    """Say `... still starting the <what> (Ns)` every 2 s until the block ends."""
    done = threading.Event()
    began = time.monotonic()

    def tick() -> None:
        while not done.wait(_PROGRESS_SECONDS):
            say(f"[demo]   ... still starting the {what} ({time.monotonic() - began:.0f}s)")

    thread = threading.Thread(target=tick, name="demo-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _api(kubeconfig: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    return api


def prepare(*, kubeconfig: Path, group: str, say: Say) -> str:
    """Create the demo namespace, apply the CRDs and the ScheduledJobs; the namespace."""
    from leasecron.testing import apply_manifests

    namespace = f"leasecron-demo-{secrets.token_hex(2)}"
    with _api(kubeconfig) as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        crds = apply_manifests(api, all_crds())
        say(f"[demo] CRDs established: {', '.join(c['metadata']['name'] for c in crds)}")
        jobs = apply_manifests(api, scheduled_jobs(namespace=namespace, group=group))
    names = ", ".join(f"{j['metadata']['name']} ({j['spec']['bucket']})" for j in jobs)
    say(f"[demo] namespace {namespace}: applied ScheduledJobs {names}")
    return namespace


def delete_namespace(*, kubeconfig: Path, namespace: str) -> None:
    """Delete the demo namespace (its jobs, Leases and JobRuns go with it); no waiting."""
    with _api(kubeconfig) as api, contextlib.suppress(client.ApiException):
        client.CoreV1Api(api).delete_namespace(namespace)


class Reader:
    """Reads the driver needs while the demo runs, over one API client."""

    def __init__(self, *, kubeconfig: Path, namespace: str) -> None:
        self._api = _api(kubeconfig)
        self._namespace = namespace

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def leases(self, *, jobs: tuple[str, ...]) -> dict[str, LeaseView]:
        """job -> its Lease's holder and leaseTransitions (jobs without a Lease are left out).
        An API error yields an empty answer: the view must not stop the demo."""
        wanted = {job_lease_name(job): job for job in jobs}
        try:
            listing = client.CoordinationV1Api(self._api).list_namespaced_lease(self._namespace)
        except (client.ApiException, OSError):
            return {}
        found: dict[str, LeaseView] = {}
        for lease in listing.items:
            job = wanted.get((lease.metadata.name if lease.metadata else None) or "")
            if job is not None and lease.spec is not None:
                found[job] = LeaseView(
                    holder=lease.spec.holder_identity or "",
                    transitions=lease.spec.lease_transitions or 0,
                )
        return found

    def jobruns(self, *, job: str = ONCE_PER_TICK_JOB, ticks: set[str]) -> tuple[int, int]:
        """(runs, Missed records) among the JobRuns of `job` with a tick in `ticks`."""
        objects = client.CustomObjectsApi(self._api)
        listing = objects.list_namespaced_custom_object(
            GROUP, VERSION, self._namespace, JOBRUN_PLURAL, label_selector=f"{LABEL_JOB}={job}"
        )
        items = listing.get("items", []) if isinstance(listing, dict) else []
        outcomes = [_outcome(item) for item in items if _tick(item) in ticks]
        missed = sum(1 for outcome in outcomes if outcome == "Missed")
        return len(outcomes) - missed, missed


def _tick(jobrun: dict[str, Any]) -> str:
    spec = jobrun.get("spec") or {}
    return str(spec.get("tick") or "")


def _outcome(jobrun: dict[str, Any]) -> str:
    status = jobrun.get("status") or {}
    return str(status.get("outcome") or "")
