"""JobRun and ScheduledJob I/O over `Kube`, as raw dicts: create a JobRun (AlreadyExists
propagates: for a once-per-tick run it means another replica has the tick), merge-patch its
status, list them per job, and list or watch the ScheduledJobs of a namespace.

Bodies are built by `models.specs.JobRun` (`to_resource`, `status_patch`) and read back with
`ScheduledJob.from_resource`; this module only moves them. It does not validate, retry, or
decide what a failed write means; callers do. JobRun has no status subresource (the create
carries `outcome: Running`), so its status patch goes to the object; ScheduledJob status is
written through its `status` subresource.
"""

from __future__ import annotations

from typing import Any

from leasecron.kube._caches import compact
from leasecron.kube.clients import Kube
from leasecron.kube.objects import ObjectStore
from leasecron.kube.watches import Informer
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.names import GROUP, JOBRUN_PLURAL, LABEL_JOB, SCHEDULEDJOB_PLURAL, VERSION
from leasecron.models.specs import job_label_value

__all__ = ["JobRunStore", "ScheduledJobStore"]


class JobRunStore:
    """create / patch / get / list / delete of JobRuns through one Kube."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._objects = ObjectStore(kube, group=GROUP, version=VERSION, plural=JOBRUN_PLURAL)

    def collection_path(self, *, namespace: str | None) -> str:
        """The JobRuns collection (None: all namespaces), e.g. for an Informer."""
        return self._objects.collection(namespace=namespace)

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create the JobRun. AlreadyExists when the name is taken: for a tick's run, someone
        else has that tick."""
        return await self._objects.create(namespace=namespace, body=body)

    async def patch_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch a JobRun (`{"status": {...}}` from `JobRun.status_patch()`); NotFound
        when it is gone (its job was deleted)."""
        return await self._objects.patch(namespace=namespace, name=name, patch=patch)

    async def get(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._objects.get(namespace=namespace, name=name)

    async def list(self, *, namespace: str, job: str | None = None) -> list[dict[str, Any]]:
        """The JobRuns of a namespace, or of one job (by its `leasecron.dev/job` label)."""
        selector = f"{LABEL_JOB}={job_label_value(job)}" if job is not None else None
        return await self._objects.list(namespace=namespace, label_selector=selector)

    async def delete(self, *, namespace: str, name: str) -> None:
        """Delete a JobRun (history pruning); one already gone is not an error."""
        await self._objects.delete(namespace=namespace, name=name)


class ScheduledJobStore:
    """get / list / watch and status writes of ScheduledJobs through one Kube."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._objects = ObjectStore(kube, group=GROUP, version=VERSION, plural=SCHEDULEDJOB_PLURAL)

    def collection_path(self, *, namespace: str | None) -> str:
        return self._objects.collection(namespace=namespace)

    async def get(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._objects.get(namespace=namespace, name=name)

    async def list(self, *, namespace: str | None) -> list[dict[str, Any]]:
        """The ScheduledJobs of `namespace` (None: all namespaces), one request."""
        return await self._objects.list(namespace=namespace)

    def informer(self, *, namespace: str | None, clock: Clock = SYSTEM_CLOCK) -> Informer:
        """A list+watch cache of the ScheduledJobs of `namespace` (not started), each kept
        `compact` (nothing writes a ScheduledJob back from it)."""
        return Informer(
            self.kube,
            path=self.collection_path(namespace=namespace),
            clock=clock,
            transform=compact,
        )

    async def patch_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the `status` subresource (`patch` is `{"status": {...}}`); include
        metadata.resourceVersion to make it conditional."""
        return await self._objects.patch(
            namespace=namespace, name=name, patch=patch, subresource="status"
        )

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._objects.create(namespace=namespace, body=body)

    async def delete(self, *, namespace: str, name: str) -> None:
        await self._objects.delete(namespace=namespace, name=name)
