"""Token floors: the durable lower bound for a job's fencing token, so that a token never
decreases when the job's Lease is deleted and created again.

A Lease's `leaseTransitions` is the fencing token of its latest grant. When the Lease goes
(`kubectl delete lease`, or its ScheduledJob deleted and applied again), a new Lease would
start at 0 and hand out tokens a store has already seen. Whoever creates a job Lease (a
replica's TickLock, an Elector, the operator) therefore starts it at `token_floor()`: the
highest token on record for the job, taken from

- its JobRuns (`spec.fencingToken`, selected by the `leasecron.dev/job` label),
- its ScheduledJob's `status.lastRun.fencingToken`,
- its tombstone on the namespace's floors Lease (`FLOORS_LEASE`), which the operator raises
  with `record_floor()` before a job's Lease goes, and which outlives the job (the floors
  Lease is owned by nothing).

The floors Lease is a plain record, written through its `LeaseLock` (`floors_lock`): labelled
`leasecron.dev/role=floors` (outside the selector that locks and electors watch), never held
(no holder, transitions 0), one annotation per job
(`TOMBSTONE_PREFIX` + the job name, shortened with a hash when too long for an annotation
key). A tombstone is never lowered and never removed; each costs about 80 bytes of the 256 KiB
an object's annotations may hold, so a namespace keeps the tombstones of a few thousand
deleted job names.

What it does not promise: a token handed out by a Lease that is deleted while no operator
records its last token, and whose runs left no record, is not known to anyone; the floor is
then the highest token that was recorded. Reads and writes go straight to the API server
(no cache), so a floor is never older than the call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from leasecron.coordination.resourcelocks import LeaseLock, LeaseStoreLike
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict
from leasecron.kube.jobruns import JobRunStore, ScheduledJobStore
from leasecron.kube.leases import LeaseStore
from leasecron.models.clocks import SYSTEM_CLOCK
from leasecron.models.leases import LeaseRecord
from leasecron.models.vocabulary import Role

FLOORS_LEASE = "leasecron-token-floors"  # one per namespace
ROLE_FLOORS = Role.FLOORS
TOMBSTONE_PREFIX = "leasecron.dev/token-floor."
"""An annotation key is `<prefix>/<name>` with `name` at most 63 characters; the job name
goes into the name part after `token-floor.`."""
CONFLICT_RETRIES = 10
"""How many times `record_floor` re-reads and retries after a write conflict."""

_NAME_LIMIT = 63
_DIGEST = 10
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")


def tombstone_key(job: str) -> str:
    """The annotation key of `job`'s tombstone. Names too long for an annotation key (or with
    characters one cannot hold) keep a readable prefix and a hash of the whole name, so two
    jobs never share a key. Raises ValueError for an empty name."""
    if not job:
        raise ValueError("job: an empty name has no tombstone")
    prefix, _, stem = TOMBSTONE_PREFIX.partition("/")
    name = f"{stem}{job}"
    if len(name) <= _NAME_LIMIT and _NAME_PART.match(name):
        return f"{prefix}/{name}"
    digest = hashlib.sha256(job.encode()).hexdigest()[:_DIGEST]
    readable = _INVALID.sub("-", job)[: _NAME_LIMIT - len(stem) - _DIGEST - 1].rstrip("-_.")
    return f"{prefix}/{stem}{readable}-{digest}" if readable else f"{prefix}/{stem}{digest}"


def _int(value: object) -> int:
    """A non-negative token from a raw field; 0 for anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _text_int(value: object) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def tombstone(floors: Mapping[str, Any] | None, *, job: str) -> int:
    """The tombstone of `job` on a raw floors Lease (0 when absent or unreadable)."""
    annotations = _mapping(_mapping(_mapping(floors).get("metadata")).get("annotations"))
    return _text_int(annotations.get(tombstone_key(job)))


def highest_token(
    *,
    job: str,
    runs: Iterable[Mapping[str, Any]] = (),
    scheduled_job: Mapping[str, Any] | None = None,
    floors: Mapping[str, Any] | None = None,
) -> int:
    """The highest fencing token on record for `job` in the given raw objects: its JobRuns
    (others' are ignored), its ScheduledJob's `status.lastRun` and its tombstone. Pure."""
    tokens = [tombstone(floors, job=job)]
    for run in runs:
        spec = _mapping(run.get("spec"))
        if spec.get("job") == job:
            tokens.append(_int(spec.get("fencingToken")))
    last_run = _mapping(_mapping(_mapping(scheduled_job).get("status")).get("lastRun"))
    tokens.append(_int(last_run.get("fencingToken")))
    return max(tokens)


async def token_floor(kube: Kube, *, namespace: str, job: str) -> int:
    """Highest fencing token on record for `job` (0 when none): max over its JobRuns' fencing
    tokens (label leasecron.dev/job=<job label value>), its ScheduledJob's status.lastRun
    fencing token, and the tombstone for `job` on the namespace's floors Lease. Raises KubeError
    when the store cannot be read (the caller must then not create the Lease)."""
    runs = await JobRunStore(kube).list(namespace=namespace, job=job)
    scheduled_job = await ScheduledJobStore(kube).get(namespace=namespace, name=job)
    floors = await LeaseStore(kube).get(namespace=namespace, name=FLOORS_LEASE)
    return highest_token(job=job, runs=runs, scheduled_job=scheduled_job, floors=floors)


def floors_lock(kube: Kube | LeaseStoreLike, namespace: str) -> LeaseLock:
    """The lock layer's handle on `namespace`'s floors Lease (never held, owned by nothing),
    reading the server (no cache)."""
    return LeaseLock.open(
        kube, None, clock=SYSTEM_CLOCK, namespace=namespace, name=FLOORS_LEASE, role=ROLE_FLOORS
    )


async def record_floor(kube: Kube, *, namespace: str, job: str, token: int) -> None:
    """Raise the tombstone of `job` to at least `token` (never lowers it): an annotation
    `leasecron.dev/token-floor.<job>` (see `tombstone_key` for long names) on the floors
    Lease, created when missing, conditional update retried on conflict (`CONFLICT_RETRIES`
    times, then the last Conflict is raised). Raises ValueError for a negative token and
    KubeError when the store cannot be written."""
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"token: {token!r} is not a fencing token (an integer >= 0)")
    changes = {tombstone_key(job): str(token)}
    lock = floors_lock(kube, namespace)
    last: Conflict | AlreadyExists | None = None
    for _ in range(CONFLICT_RETRIES + 1):
        current = await lock.get()
        if current is None:
            try:
                await lock.create(
                    LeaseRecord(name=FLOORS_LEASE, namespace=namespace), annotations=changes
                )
                return
            except AlreadyExists as e:  # created meanwhile: read it and update
                last = e
                continue
        if tombstone(current.obj, job=job) >= token:
            return
        try:
            await lock.annotate(changes, base=current)
            return
        except Conflict as e:
            last = e
    assert last is not None
    raise last
