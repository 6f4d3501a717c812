"""Every write the operator sends, behind one fence: `Writer` refuses (raises `Fenced`,
before anything is sent) whenever `may_write()` says this process is not the active
operator. So a standby, or a leader that has just lost its Lease, writes nothing.

Owns the write calls (create a job's Lease and raise a token floor, both through the lock
layer as every Lease write; create/patch/delete JobRun, create Event, patch ScheduledJob
status, add or remove the operator's finalizer) and their counting. It does not retry or
interpret errors: the reconciler does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasecron.coordination.floors import record_floor
from leasecron.coordination.resourcelocks import LeaseLock
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore
from leasecron.kube.objects import MERGE_PATCH, ObjectStore
from leasecron.models.clocks import SYSTEM_CLOCK
from leasecron.models.leases import LeaseRecord
from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION
from leasecron.models.vocabulary import Role
from leasecron.operator import _bodies
from leasecron.operator._facts import JobFacts
from leasecron.operator._metrics import STATUS_PATCHES, WRITES

FIELD_MANAGER = "leasecron-operator"
"""The field manager of the status the operator writes (see metadata.managedFields)."""
FINALIZER = "leasecron.dev/token-floor"
"""Held on a coordinated ScheduledJob until its last fencing token is recorded as a floor."""


class Fenced(Exception):
    """This process is not the active operator; nothing was sent."""


class Writer:
    """The operator's writes through `kube`, each checked against `may_write()` first."""

    def __init__(self, kube: Kube, *, may_write: Callable[[], bool]) -> None:
        self._may_write = may_write
        self._runs = JobRunStore(kube)
        self._kube = kube
        self._jobs = ObjectStore(kube, group=GROUP, version=VERSION, plural=SCHEDULEDJOB_PLURAL)
        self._events = ObjectStore(kube, group="", version="v1", plural="events")

    def _check(self, kind: str) -> None:
        if not self._may_write():
            raise Fenced(f"not the active operator: refusing to write a {kind}")
        WRITES.labels(kind=kind).inc()

    async def create_job_lease(self, facts: JobFacts, *, transitions: int) -> dict[str, Any]:
        """Create the job's own Lease through the lock layer: free, labelled and owned by the
        job, at `transitions` (its token floor: the first grant gets the next token)."""
        name, namespace = facts.job_lease, facts.ref.namespace
        if name is None:
            raise ValueError(f"job {facts.ref.name} ({facts.bucket}) has no Lease of its own")
        if transitions < 0:
            raise ValueError(f"transitions: {transitions} is below 0")
        self._check("Lease")
        lock = LeaseLock.open(
            self._kube,
            None,
            clock=SYSTEM_CLOCK,
            namespace=namespace,
            name=name,
            role=Role.LEADER,
            labels=_bodies.job_lease_labels(facts),
            owner_reference=_bodies.owner_reference(facts.ref),
        )
        record = LeaseRecord(name=name, namespace=namespace, transitions=transitions)
        return await lock.create(record)

    async def record_floor(self, *, namespace: str, job: str, token: int) -> None:
        """Raise `job`'s tombstone on the namespace's floors Lease to at least `token`."""
        self._check("Lease")
        await record_floor(self._kube, namespace=namespace, job=job, token=token)

    async def set_finalizers(
        self, *, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> dict[str, Any]:
        """Replace the ScheduledJob's finalizers, conditional on `resource_version`
        (Conflict when the object changed meanwhile: someone else's finalizer is never lost)."""
        self._check("ScheduledJob")
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        return await self._jobs.patch(namespace=namespace, name=name, patch=patch)

    async def create_run(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check("JobRun")
        return await self._runs.create(namespace=namespace, body=body)

    async def patch_run(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self._check("JobRun")
        return await self._runs.patch_status(namespace=namespace, name=name, patch=patch)

    async def delete_run(self, *, namespace: str, name: str) -> None:
        self._check("JobRun")
        await self._runs.delete(namespace=namespace, name=name)

    async def create_event(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check("Event")
        return await self._events.create(namespace=namespace, body=body)

    async def patch_status(
        self, *, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        self._check("ScheduledJob/status")
        STATUS_PATCHES.inc()
        path = self._jobs.path(namespace=namespace, name=name, subresource="status")
        return await self._kube.request(
            "PATCH",
            path,
            body={"status": status},
            query={"fieldManager": FIELD_MANAGER},
            content_type=MERGE_PATCH,
        )
