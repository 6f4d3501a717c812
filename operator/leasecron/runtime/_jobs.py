"""`JobTable`: the ScheduledJobs of this replica's group, each with its worker.

Fed by the informer on the namespace's ScheduledJobs, it keeps the jobs whose `spec.group` is
this replica's group and reacts live: a new job gets a worker, an update re-plans it (or
replaces the worker when its bucket, handler, election timings or uid changed), a delete or
suspended single-owner job stops it (cancelling a running single-owner handler). Every
once-per-tick job goes to the one claim engine (`_shards.ShardTicks`), whatever its lock
settings, and so does every every-replica job (its timer and run path, no claim). Changes of
one job are applied one at a time, in order; different jobs do not wait for each other. Invalid
specs are logged once per generation with the field-naming message and skipped; a job whose
handler is not registered here is logged once at info and ignored. Neither stops the other
jobs.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from leasecron._logs import get_logger
from leasecron._metrics import prepare_job
from leasecron.coordination.floors import highest_token
from leasecron.kube.watches import WatchEvent
from leasecron.models.specs import Bucket, ScheduledJob, SpecError
from leasecron.runtime._invoke import StopReason
from leasecron.runtime._owner import OwnerWorker
from leasecron.runtime._services import Services
from leasecron.runtime._shards import ShardTicks

_log = get_logger("leasecron.runtime.jobs")


def _same(a: tuple[ScheduledJob, datetime] | None, b: tuple[ScheduledJob, datetime] | None) -> bool:
    """Whether two wanted states are the one job validated once (`JobTable._validate`)."""
    return a is not None and b is not None and a[0] is b[0] and a[1] == b[1]


class Worker(Protocol):
    @property
    def job(self) -> ScheduledJob: ...

    def start(self) -> None: ...

    def update(self, job: ScheduledJob) -> None: ...

    async def stop(self, reason: StopReason) -> None: ...


def worker_key(job: ScheduledJob) -> tuple[Any, ...]:
    """What a worker cannot change on the fly: a different key means a new worker."""
    spec = job.spec
    election = spec.election if spec.bucket is Bucket.SINGLE_OWNER else None
    return (job.uid, spec.bucket, job.handler_name, election)


def sharded(job: ScheduledJob) -> bool:
    """Whether `job`'s ticks go through the claim engine: every once-per-tick job's do."""
    return job.spec.bucket is Bucket.ONCE_PER_TICK


def created_at(obj: dict[str, Any]) -> datetime:
    """metadata.creationTimestamp, or now when it is missing or unreadable."""
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return datetime.now(UTC)


class ShardedWorker:
    """The JobTable's worker for a scheduled job (once-per-tick or every-replica): its ticks
    go through the shared ShardTicks' one timer and run path."""

    def __init__(self, ticks: ShardTicks, job: ScheduledJob, *, created: datetime) -> None:
        self._ticks, self._job, self._created = ticks, job, created

    @property
    def job(self) -> ScheduledJob:
        return self._job

    def start(self) -> None:
        self._ticks.add(self._job, created=self._created)

    def update(self, job: ScheduledJob) -> None:
        self._job = job
        self._ticks.update(job)

    async def stop(self, reason: StopReason) -> None:
        await self._ticks.remove(self._job.name, reason)


WorkerFactory = Callable[[ScheduledJob, datetime], Worker]


class JobTable:
    """Desired jobs (from the informer) and running workers, converged job by job."""

    def __init__(
        self,
        services: Services,
        *,
        make_worker: WorkerFactory | None = None,
    ) -> None:
        self._services = services
        self._make_worker = make_worker or self._new_worker
        self._desired: dict[str, tuple[ScheduledJob, datetime] | None] = {}
        self._workers: dict[str, Worker] = {}
        self._converging: dict[str, asyncio.Task[None]] = {}
        self._reported: dict[str, Any] = {}
        self._validated: dict[str, tuple[tuple[Any, ...], Any, ScheduledJob]] = {}
        """Per job: its uid, generation and namespace, its spec, and the job validated from
        them."""
        self.ignored: dict[str, str] = {}
        """Jobs of this group this replica does not run, and why (replaced, never mutated)."""
        self._closed = False
        self.shard_ticks = ShardTicks(services, shards=services.shards)

    @property
    def workers(self) -> dict[str, Worker]:
        return dict(self._workers)

    @property
    def known(self) -> int:
        """How many of the group's ScheduledJobs this table knows (run here or not)."""
        return len(self._desired)

    async def settled(self) -> None:
        """Wait until every change seen so far has been applied (for tests and probes)."""
        while pending := [t for t in self._converging.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    def on_event(self, event: WatchEvent) -> None:
        """Informer callback (loop thread)."""
        if event.type == "SYNCED" or self._closed:
            return
        name = str((event.obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        if event.type == "DELETED":
            self.shard_ticks.forget_foreign(name)
            self._ignore(name, None)
            self._reported.pop(name, None)
            self._validated.pop(name, None)
            self.set_desired(name, None)
        else:
            self.shard_ticks.note_token(name, highest_token(job=name, scheduled_job=event.obj))
            wanted = self._wanted(event.obj)
            if not _same(wanted, self._desired.get(name)):  # a status write changes nothing
                self.set_desired(name, wanted)

    def resync(self, objects: list[dict[str, Any]]) -> None:
        """Evaluate every object again (after a handler was registered, for instance)."""
        seen = set()
        for obj in objects:
            name = str((obj.get("metadata") or {}).get("name") or "")
            seen.add(name)
            self.shard_ticks.note_token(name, highest_token(job=name, scheduled_job=obj))
            self.set_desired(name, self._wanted(obj))
        for name in set(self._desired) - seen:
            self.set_desired(name, None)

    def set_desired(self, name: str, wanted: tuple[ScheduledJob, datetime] | None) -> None:
        self._desired[name] = wanted
        task = self._converging.get(name)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(
                self._converge(name), name=f"leasecron converge {name}"
            )
            self._converging[name] = task
            task.add_done_callback(functools.partial(self._converged, name))

    def _converged(self, name: str, task: asyncio.Task[None]) -> None:
        """A job's convergence ended: its task is let go (one per job would stay held)."""
        if self._converging.get(name) is task:
            del self._converging[name]

    async def close(self, reason: StopReason) -> None:
        """Stop every worker (concurrently), for shutdown."""
        self._closed = True
        for task in list(self._converging.values()):
            task.cancel()
        await asyncio.gather(*self._converging.values(), return_exceptions=True)
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(worker.stop(reason) for worker in workers), return_exceptions=True)
        await self.shard_ticks.close(reason)

    def _wanted(self, obj: dict[str, Any]) -> tuple[ScheduledJob, datetime] | None:
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name"))
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        if (spec or {}).get("group", "default") != self._services.group:
            self._ignore(name, None)
            return None
        if metadata.get("deletionTimestamp"):
            return None
        try:
            job = self._validate(name, obj)
        except SpecError as e:
            self._ignore(name, f"invalid spec: {e}")
            self._report_once(metadata, ("invalid", metadata.get("generation")), str(e))
            return None
        if job.handler_name not in self._services.registry:
            if sharded(job):
                self.shard_ticks.note_foreign(job)
            self._ignore(name, f"handler {job.handler_name!r} is not registered here")
            self._report_once(metadata, ("unregistered", job.handler_name), "")
            return None
        self._ignore(name, None)
        self._reported.pop(name, None)
        self.shard_ticks.forget_foreign(name)
        if job.spec.bucket is Bucket.SINGLE_OWNER and job.spec.suspend:
            return None
        return job, created_at(obj)

    def _validate(self, name: str, obj: dict[str, Any]) -> ScheduledJob:
        """The job `obj` declares, validated again only when what it is read from changed
        (a status write, the operator's after every run, changes none of it)."""
        metadata = obj.get("metadata") or {}
        key = (metadata.get("uid"), metadata.get("generation"), metadata.get("namespace"))
        cached = self._validated.get(name)
        spec = obj.get("spec")
        if cached is not None and cached[0] == key and (cached[1] is spec or cached[1] == spec):
            return cached[2]
        job = ScheduledJob.from_resource(obj)
        self._validated[name] = (key, spec, job)  # the cache's objects are never changed in place
        return job

    def _ignore(self, name: str, reason: str | None) -> None:
        if self.ignored.get(name) == reason:
            return
        ignored = dict(self.ignored)
        if reason is None:
            ignored.pop(name, None)
        else:
            ignored[name] = reason
        self.ignored = ignored

    def _report_once(self, metadata: dict[str, Any], what: tuple[Any, ...], message: str) -> None:
        name = str(metadata.get("name"))
        if self._reported.get(name) == what:
            return
        self._reported[name] = what
        fields = {"job": name, "namespace": self._services.namespace}
        if what[0] == "invalid":
            _log.warning(
                "invalid ScheduledJob skipped", generation=what[1], error=message, **fields
            )
        else:
            _log.info("no handler registered here for this job; ignored", handler=what[1], **fields)

    async def _converge(self, name: str) -> None:
        while True:
            wanted = self._desired.get(name)
            current = self._workers.get(name)
            if wanted is None:
                if current is not None:
                    del self._workers[name]
                    await current.stop(StopReason.REMOVED)
                if self._desired.get(name) is None:
                    self._desired.pop(name, None)
                    return
                continue
            job, created = wanted
            if current is not None and self._key(current.job) == self._key(job):
                current.update(job)
            else:
                if current is not None:
                    del self._workers[name]
                    await current.stop(StopReason.REMOVED)
                    if self._desired.get(name) is not wanted:
                        continue
                worker = self._make_worker(job, created)
                self._workers[name] = worker
                worker.start()
            if self._desired.get(name) is wanted:
                return

    def _key(self, job: ScheduledJob) -> tuple[Any, ...]:
        return worker_key(job)

    def _new_worker(self, job: ScheduledJob, created: datetime) -> Worker:
        services = self._services
        prepare_job(services.namespace, job.name, job.spec.bucket.value)
        if job.spec.bucket is Bucket.SINGLE_OWNER:
            return OwnerWorker(services, job)
        return ShardedWorker(self.shard_ticks, job, created=created)
