"""Handing a job's ticks from its own Lease to a shard Lease, and back (docs/claims.md).

A job's ticks are claimed on exactly one Lease at a time, and the hand-over between the two
is written on the Leases themselves, so that replicas that disagree for a moment about a
job's claim model (they saw its spec change at different times) or about the shard count
(a rollout changing it) never claim one tick on both:

- `hand_to_shard` writes a *gate* on the job's Lease (annotation `leasecron.dev/sharded`):
  ticks from `start` on are claimed on shard Lease `lease`. It is a conditional write, and
  `start` is after the last tick the job Lease recorded, so a per-job claim either landed
  before it (and its tick is below `start`) or sees the gate and refuses (`SKIP_SHARDED`).
  It is only written while no per-job grant is live (a job never overlaps itself).
- `release_from_shard` undoes it in two conditional writes: first the shard Lease records
  that it lets go of the gate (annotation `leasecron.dev/released`), so a shard claim written
  after that does not run the job, and every shard claim written before it is at or below
  the shard's recorded tick X; then the gate is removed from the job's Lease, whose recorded
  tick becomes at least X (and the gate's start) and whose token at least the shard's, so
  per-job claims go on above every tick and token the shard may have used for the job.

Both are idempotent and safe to run from several replicas at once (a conflict just means
"look again later"). They do not decide which model a job should have (`models.shards`) and
do not claim ticks (`locks.TickLock`, `shards.ShardLock`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from leasecron._logs import get_logger
from leasecron.coordination._views import Seen
from leasecron.coordination.resourcelocks import LeaseLock, TokenFloor
from leasecron.kube.errors import KubeError
from leasecron.models.clocks import Clock
from leasecron.models.decisions import grant_live
from leasecron.models.leases import (
    LeaseRecord,
    lease_annotations,
    lease_body,
    parse_lease,
    with_annotations,
)
from leasecron.models.names import ANNOTATION_TICK, format_tick
from leasecron.models.shards import (
    ANNOTATION_RELEASED,
    ANNOTATION_SHARDED,
    ShardGate,
    format_gate,
    format_released,
    gate_on,
    parse_released,
)

_log = get_logger("leasecron.coordination.handovers")

GateFor = Callable[[LeaseRecord | None, int], ShardGate]
"""Builds the gate to write from the job Lease's record (None: there is no Lease yet) and
the job's current token."""


async def _seen(lock: LeaseLock, request_timeout: float | None) -> Seen | None:
    """The Lease as this process knows it; one GET when the view does not have it."""
    seen = lock.observe()
    if seen is None:
        seen = await lock.get(timeout=request_timeout)
    return seen


def _live(seen: Seen, *, clock: Clock, fallback_s: float) -> bool:
    return grant_live(seen.observation, now_mono=clock.monotonic(), fallback_s=fallback_s)


async def hand_to_shard(
    job_lock: LeaseLock,
    *,
    gate_for: GateFor,
    floor: TokenFloor,
    clock: Clock,
    fallback_s: float,
    valid: Callable[[ShardGate], bool] = lambda gate: True,
    request_timeout: float | None = None,
) -> ShardGate | None:
    """The gate in force on the job's Lease: the one found there, or one written now from
    `gate_for` (also over a gate that is not `valid`: it names no shard Lease, so nothing
    ran under it). None when it cannot be written now (a per-job grant is live, another
    writer was first, or the store did not answer): try again later."""
    try:
        seen = await _seen(job_lock, request_timeout)
        if seen is not None:
            gate = gate_on(seen.obj)
            if gate is not None and valid(gate):
                return gate
            if _live(seen, clock=clock, fallback_s=fallback_s):
                return None
            gate = gate_for(seen.observation.record, seen.observation.record.transitions)
            body = with_annotations(seen.obj, {ANNOTATION_SHARDED: format_gate(gate)})
            obj = await job_lock.store.replace(
                namespace=job_lock.namespace, body=body, timeout=request_timeout
            )
        else:
            token = await floor()
            gate = gate_for(None, token)
            record = LeaseRecord(
                name=job_lock.name, namespace=job_lock.namespace, transitions=token
            )
            body = lease_body(
                record, labels=job_lock.labels, owner_reference=job_lock.owner_reference
            )
            body = with_annotations(body, {ANNOTATION_SHARDED: format_gate(gate)})
            obj = await job_lock.store.create(
                namespace=job_lock.namespace, body=body, timeout=request_timeout
            )
    except KubeError as e:
        _log.debug("hand-over to a shard not written now", lease=job_lock.name, error=repr(e))
        return None
    job_lock.view.note(obj)
    written = gate_on(obj)
    _log.info(
        "job handed over to a shard",
        lease=job_lock.name,
        shard_lease=gate.lease,
        start=format_tick(gate.start),
        token=gate.token,
    )
    return written


async def release_from_shard(
    job: str,
    job_lock: LeaseLock,
    shard_lock_for: Callable[[ShardGate], LeaseLock | None],
    *,
    shard_floor: Callable[[ShardGate], Awaitable[int]],
    clock: Clock,
    fallback_s: float,
    request_timeout: float | None = None,
) -> bool:
    """Take `job`'s ticks back from the shard Lease its Lease's gate names. True once the
    job's Lease carries no gate (per-job claims may go on); False: not now, try again.
    `shard_lock_for` gives None for a gate that names no valid shard Lease (corrupt): no
    shard claim ran the job under it, so only the gate is removed."""
    try:
        seen = await _seen(job_lock, request_timeout)
        gate = gate_on(seen.obj) if seen is not None else None
        if seen is None or gate is None:
            return True
        shard_lock = shard_lock_for(gate)
        shard = (
            await _let_go(job, gate, shard_lock, shard_floor, request_timeout)
            if shard_lock is not None
            else LeaseRecord()
        )
        if _live(seen, clock=clock, fallback_s=fallback_s):
            return False
        record = seen.observation.record
        body = with_annotations(seen.obj, {ANNOTATION_SHARDED: None})
        # At or after the gate's start, so that a later gate never starts where this one did
        # (the shard Lease keeps refusing that one).
        ticks = [t for t in (record.tick, shard.tick, gate.start) if t is not None]
        body["metadata"]["annotations"][ANNOTATION_TICK] = format_tick(max(ticks))
        spec = body.setdefault("spec", {})
        spec["leaseTransitions"] = max(record.transitions, shard.transitions, gate.token)
        obj = await job_lock.store.replace(
            namespace=job_lock.namespace, body=body, timeout=request_timeout
        )
    except KubeError as e:
        _log.debug("release from a shard not done now", lease=job_lock.name, error=repr(e))
        return False
    job_lock.view.note(obj)
    _log.info(
        "job taken back from its shard",
        lease=job_lock.name,
        shard_lease=gate.lease,
        tick=format_tick(max(ticks)),
        token=spec["leaseTransitions"],
    )
    return True


async def _let_go(
    job: str,
    gate: ShardGate,
    shard_lock: LeaseLock,
    shard_floor: Callable[[ShardGate], Awaitable[int]],
    request_timeout: float | None,
) -> LeaseRecord:
    """Make the shard Lease record that it lets go of `gate`; its record after that."""
    seen = await _seen(shard_lock, request_timeout)
    if seen is not None:
        released = parse_released(lease_annotations(seen.obj))
        if released is not None and released.get(job) == gate.start:
            return seen.observation.record
        entries = {**(released or {}), job: gate.start}
        body = with_annotations(seen.obj, {ANNOTATION_RELEASED: format_released(entries)})
        obj = await shard_lock.store.replace(
            namespace=shard_lock.namespace, body=body, timeout=request_timeout
        )
    else:
        # No shard Lease: created released, above every token its jobs had, so that a claim
        # that would have created it finds it and does not run the job.
        record = LeaseRecord(
            name=shard_lock.name,
            namespace=shard_lock.namespace,
            transitions=await shard_floor(gate),
        )
        body = lease_body(record, labels=shard_lock.labels)
        body = with_annotations(body, {ANNOTATION_RELEASED: format_released({job: gate.start})})
        obj = await shard_lock.store.create(
            namespace=shard_lock.namespace, body=body, timeout=request_timeout
        )
    shard_lock.view.note(obj)
    return parse_lease(obj)


def gate_start(
    record: LeaseRecord | None, *, first_after: Callable[[datetime], datetime], not_before: datetime
) -> datetime:
    """The first tick a new gate hands over: the job's first tick after the last one its
    Lease recorded and after `not_before`."""
    after = not_before if record is None or record.tick is None else max(record.tick, not_before)
    return first_after(after)
