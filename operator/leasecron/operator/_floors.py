"""The operator's part in keeping fencing tokens from going backwards when a job's Lease is
deleted and created again (`coordination.floors` holds the floors and their storage).

Owns three duties:

- **create above the floor**: `lease_floor()` is where a new job Lease starts (its
  `leaseTransitions`): the job's token floor (tombstone read from the API server, JobRuns and
  status from the caches), or the last token of a Lease of the job this process saw deleted,
  whichever is higher.
- **hold the job until its floor is recorded**: a coordinated job whose Lease has handed out
  a token (or whose status shows one) carries the finalizer `leasecron.dev/token-floor`
  (`hold()`). When it is deleted (`finalize()`), its last token (its Lease read afresh, its
  JobRuns, its status) is recorded as its tombstone on the namespace's floors Lease, then the
  finalizer is removed. Replicas stop claiming a job once it is being deleted.
- **a Lease deleted under a live job**: `lease_gone()` records the last token the watch saw.

What it does not promise: while no operator runs, a deleted ScheduledJob keeps its finalizer
(remove it by hand after uninstalling the operator: `kubectl patch scheduledjob NAME --type
merge -p '{"metadata":{"finalizers":null}}'`), and a Lease deleted then is not recorded (its
JobRuns and the job's status still are, while the job exists). A floor record that keeps
failing holds a deletion for at most `limit_s`; the finalizer is then removed anyway and the
failure logged as an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination.floors import FLOORS_LEASE, token_floor, tombstone
from leasecron.kube.clients import Kube
from leasecron.kube.errors import Conflict, KubeError, NotFound
from leasecron.kube.leases import LeaseStore
from leasecron.models.clocks import Clock
from leasecron.models.leases import parse_lease
from leasecron.models.names import job_lease_name
from leasecron.operator._facts import JobFacts
from leasecron.operator._observed import Snapshot
from leasecron.operator._writes import FINALIZER, Fenced, Writer

_log = get_logger("leasecron.operator.floors")

Key = tuple[str, str]
FINALIZE_LIMIT_S = 30.0
"""How long a failing floor record may hold a ScheduledJob's deletion."""
GONE_ATTEMPTS = 3
"""Attempts to record the last token of a job Lease seen deleted."""
RETRY_S = 1.0


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    raw = (obj.get("metadata") or {}).get("finalizers")
    return [str(f) for f in raw] if isinstance(raw, list) else []


def status_token(obj: Mapping[str, Any]) -> int:
    """The fencing token of the job's `status.lastRun` (0 without one)."""
    token = ((obj.get("status") or {}).get("lastRun") or {}).get("fencingToken")
    return token if isinstance(token, int) and not isinstance(token, bool) else 0


def needs_hold(obj: Mapping[str, Any], facts: JobFacts, snapshot: Snapshot) -> bool:
    """Whether the job should get the finalizer now: it has a Lease of its own that has
    handed out a token (or a run recorded one) and the finalizer is not there yet."""
    if facts.job_lease is None or FINALIZER in finalizers(obj):
        return False
    lease = snapshot.job_lease
    issued = lease.record.transitions if lease is not None else 0
    ran = max((run.token or 0 for run in snapshot.runs), default=0)
    return max(issued, ran, status_token(obj)) > 0


def finalize_gives_up(first_seen: float, now: float, *, limit_s: float) -> bool:
    """Whether a deletion held since `first_seen` has waited long enough for its floor."""
    return now - first_seen >= limit_s


class FloorKeeper:
    """The floor duties of one active operator (see module doc); writes through `writer`."""

    def __init__(
        self, kube: Kube, writer: Writer, *, clock: Clock, limit_s: float = FINALIZE_LIMIT_S
    ) -> None:
        self._kube = kube
        self._leases = LeaseStore(kube)
        self._writer = writer
        self._clock = clock
        self._limit_s = limit_s
        self._finalizing: dict[str, float] = {}
        self._gone: dict[Key, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def lease_floor(self, obj: Mapping[str, Any], facts: JobFacts, snapshot: Snapshot) -> int:
        """Where a new Lease of the job starts: `token_floor()`'s answer, with the JobRuns and
        status taken from the operator's watch-fed caches and only the tombstone read afresh
        (one GET per Lease created), or the last token of a Lease of the job seen deleted.
        KubeError when the tombstone cannot be read."""
        namespace, job = facts.ref.namespace, facts.ref.name
        floors = await self._leases.get(namespace=namespace, name=FLOORS_LEASE)
        ran = max((run.token or 0 for run in snapshot.runs), default=0)
        recorded = max(tombstone(floors, job=job), ran, status_token(obj))
        return max(recorded, self._gone.get((namespace, job), 0))

    def lease_created(self, namespace: str, job: str) -> None:
        self._gone.pop((namespace, job), None)

    async def hold(self, obj: Mapping[str, Any], facts: JobFacts, snapshot: Snapshot) -> None:
        """Add the finalizer when `needs_hold`; a failed write (a Conflict, the API server
        refusing) is left for the next pass, which still needs it."""
        if not needs_hold(obj, facts, snapshot):
            return
        metadata = obj.get("metadata") or {}
        try:
            await self._writer.set_finalizers(
                namespace=facts.ref.namespace,
                name=facts.ref.name,
                finalizers=[*finalizers(obj), FINALIZER],
                resource_version=str(metadata.get("resourceVersion") or ""),
            )
        except Conflict:
            return
        except KubeError as e:
            _log.warning(
                "could not add the finalizer",
                namespace=facts.ref.namespace,
                job=facts.ref.name,
                error=repr(e),
            )

    async def finalize(self, key: Key, obj: Mapping[str, Any]) -> bool:
        """Record the last token of a job being deleted, then drop the finalizer. False when
        it should be tried again (the record failed, within the limit, or a Conflict)."""
        if FINALIZER not in finalizers(obj):
            return True
        namespace, job = key
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        first = self._finalizing.setdefault(uid, self._clock.monotonic())
        try:
            lease = await self._leases.get(namespace=namespace, name=job_lease_name(job))
            issued = parse_lease(lease).transitions if lease is not None else 0
            floor = await token_floor(self._kube, namespace=namespace, job=job)
            token = max(issued, floor, status_token(obj))
            if token > 0:
                await self._writer.record_floor(namespace=namespace, job=job, token=token)
        except KubeError as e:
            if not finalize_gives_up(first, self._clock.monotonic(), limit_s=self._limit_s):
                _log.warning(
                    "could not record the token floor", namespace=namespace, job=job, error=repr(e)
                )
                return False
            _log.error(
                "token floor not recorded; deleting the job anyway: a Lease created for a job "
                "of the same name may hand out tokens already used",
                namespace=namespace,
                job=job,
                error=repr(e),
            )
        else:
            _log.info("recorded token floor", namespace=namespace, job=job, token=token)
        try:
            await self._writer.set_finalizers(
                namespace=namespace,
                name=job,
                finalizers=[f for f in finalizers(obj) if f != FINALIZER],
                resource_version=str(metadata.get("resourceVersion") or ""),
            )
        except Conflict:
            return False
        except NotFound:
            pass  # gone already: a pass before this one removed the finalizer
        self._finalizing.pop(uid, None)
        return True

    def lease_gone(self, namespace: str, job: str, token: int, *, job_exists: bool) -> None:
        """A job Lease was seen deleted with `token` as its last token: remember it for the
        next Lease of a job that still exists, and record it as the job's floor."""
        if job_exists:
            key = (namespace, job)
            self._gone[key] = max(self._gone.get(key, 0), token)
        task = asyncio.create_task(self._record_gone(namespace, job, token))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record_gone(self, namespace: str, job: str, token: int) -> None:
        for attempt in range(1, GONE_ATTEMPTS + 1):
            try:
                await self._writer.record_floor(namespace=namespace, job=job, token=token)
                _log.info("recorded token floor", namespace=namespace, job=job, token=token)
                return
            except Fenced:
                return
            except KubeError as e:
                level = _log.error if attempt == GONE_ATTEMPTS else _log.warning
                level(
                    "could not record the token floor", namespace=namespace, job=job, error=repr(e)
                )
            if attempt < GONE_ATTEMPTS:
                await asyncio.sleep(RETRY_S)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
