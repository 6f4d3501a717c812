"""The demo's cluster side: a throwaway local control plane (or the cluster of a given
kubeconfig), a namespace of its own with the CRDs and the three ScheduledJobs applied, and
the two reads the live view needs (Lease holders, JobRun count).

Owns talking to the cluster from the driver, with the admin credentials of the kubeconfig.
The namespace is new for every run (`leasecron-demo-<4 hex>`), so a previous run's Leases
and JobRuns never leak into the figures; on a given cluster it is deleted at the end, the
local control plane is simply thrown away.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecron.demo._jobs import ONCE_PER_TICK_JOB, scheduled_jobs
from leasecron.demo._view import LeaseView
from leasecron.kube.clients import Kube, collection_path, object_path
from leasecron.kube.errors import KubeError
from leasecron.kube.leases import LEASE_GROUP, LEASE_PLURAL, LEASE_VERSION
from leasecron.models.names import (
    GROUP,
    JOBRUN_PLURAL,
    LABEL_JOB,
    SCHEDULEDJOB_PLURAL,
    VERSION,
    job_lease_name,
)
from leasecron.operator.crds import all_crds

Say = Callable[[str], None]
_PROGRESS_SECONDS = 2.0
_APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply; JSON is YAML
_APPLY_QUERY = {"fieldManager": "leasecron-demo", "force": "true"}
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_ESTABLISHED_TIMEOUT = 30.0
_ESTABLISHED_POLL = 0.05


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
        with _kube(kubeconfig) as kube:
            server = str(kube.api_client.configuration.host)
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


@contextmanager
def _kube(kubeconfig: Path) -> Iterator[Kube]:
    kube = Kube.from_config(kubeconfig=str(kubeconfig), max_workers=1)
    try:
        yield kube
    finally:
        asyncio.run(kube.close())


def _apply(kube: Kube, *, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of `body` at `path` (the object's own path)."""
    return kube.request_sync(
        "PATCH", path, body=body, query=_APPLY_QUERY, content_type=_APPLY_PATCH
    )


def _wait_established(kube: Kube, *, name: str) -> None:
    """Return once CRD `name` is Established (a few polls right after its creation)."""
    deadline = time.monotonic() + _ESTABLISHED_TIMEOUT
    while True:
        crd = kube.request_sync("GET", f"{_CRD_PATH}/{name}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise KubeError(
                f"CustomResourceDefinition {name} not Established after {_ESTABLISHED_TIMEOUT:g}s"
            )
        time.sleep(_ESTABLISHED_POLL)


def prepare(*, kubeconfig: Path, group: str, say: Say) -> str:
    """Create the demo namespace, apply the CRDs and the ScheduledJobs; the namespace."""
    namespace = f"leasecron-demo-{secrets.token_hex(2)}"
    with _kube(kubeconfig) as kube:
        kube.request_sync("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        names = []
        for crd in all_crds():
            name = crd["metadata"]["name"]
            _apply(kube, path=f"{_CRD_PATH}/{name}", body=crd)
            _wait_established(kube, name=name)
            names.append(name)
        say(f"[demo] CRDs established: {', '.join(names)}")
        jobs = []
        for job in scheduled_jobs(namespace=namespace, group=group):
            path = object_path(
                group=GROUP,
                version=VERSION,
                plural=SCHEDULEDJOB_PLURAL,
                namespace=namespace,
                name=job["metadata"]["name"],
            )
            _apply(kube, path=path, body=job)
            jobs.append(f"{job['metadata']['name']} ({job['spec']['bucket']})")
    say(f"[demo] namespace {namespace}: applied ScheduledJobs {', '.join(jobs)}")
    return namespace


def delete_namespace(*, kubeconfig: Path, namespace: str) -> None:
    """Delete the demo namespace (its jobs, Leases and JobRuns go with it); no waiting."""
    # Already gone, or the cluster went away: nothing left to clean either way.
    with _kube(kubeconfig) as kube, contextlib.suppress(KubeError):
        kube.request_sync("DELETE", f"/api/v1/namespaces/{namespace}")


class Reader:
    """Reads the driver needs while the demo runs, over one Kube client."""

    def __init__(self, *, kubeconfig: Path, namespace: str) -> None:
        self._kube = Kube.from_config(kubeconfig=str(kubeconfig), max_workers=1)
        self._namespace = namespace

    def close(self) -> None:
        asyncio.run(self._kube.close())

    def leases(self, *, jobs: tuple[str, ...]) -> dict[str, LeaseView]:
        """job -> its Lease's holder and leaseTransitions (jobs without a Lease are left out).
        An API error yields an empty answer: the view must not stop the demo."""
        wanted = {job_lease_name(job): job for job in jobs}
        path = collection_path(
            group=LEASE_GROUP, version=LEASE_VERSION, plural=LEASE_PLURAL, namespace=self._namespace
        )
        try:
            listing = self._kube.request_sync("GET", path)
        except KubeError:
            return {}
        found: dict[str, LeaseView] = {}
        for lease in listing.get("items") or []:
            job = wanted.get(str((lease.get("metadata") or {}).get("name")))
            if job is not None:
                spec = lease.get("spec") or {}
                found[job] = LeaseView(
                    holder=str(spec.get("holderIdentity") or ""),
                    transitions=int(spec.get("leaseTransitions") or 0),
                )
        return found

    def jobruns(self, *, job: str = ONCE_PER_TICK_JOB, ticks: set[str]) -> tuple[int, int]:
        """(runs, Missed records) among the JobRuns of `job` with a tick in `ticks`."""
        path = collection_path(
            group=GROUP, version=VERSION, plural=JOBRUN_PLURAL, namespace=self._namespace
        )
        listing = self._kube.request_sync(
            "GET", path, query={"labelSelector": f"{LABEL_JOB}={job}"}
        )
        items = listing.get("items") or []
        outcomes = [_outcome(item) for item in items if _tick(item) in ticks]
        missed = sum(1 for outcome in outcomes if outcome == "Missed")
        return len(outcomes) - missed, missed


def _tick(jobrun: dict[str, Any]) -> str:
    spec = jobrun.get("spec") or {}
    return str(spec.get("tick") or "")


def _outcome(jobrun: dict[str, Any]) -> str:
    status = jobrun.get("status") or {}
    return str(status.get("outcome") or "")
