"""Which Lease claims a sharded job's ticks, as this replica acts on it (docs/claims.md,
"Moving a job between claim models").

`Handovers` writes the gate that hands a job's ticks to a shard Lease (`coordination.handovers`)
for every job this replica runs through shards, spread over the replicas (the one ranked first
for the job writes at once, the others later if it is still missing), and reads the gates
back from the watch-fed Lease view, parsed once per resourceVersion. `take_back` is what a
per-job claim does when it finds its job's Lease gated: it undoes the hand-over.

It does not claim ticks or run handlers (`_shards`, `_once`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination._views import LeaseView
from leasecron.coordination.handovers import gate_start, hand_to_shard, release_from_shard
from leasecron.coordination.resourcelocks import ROLE_JOB, ROLE_SHARD, LeaseLock
from leasecron.coordination.shards import shard_labels
from leasecron.models.decisions import rendezvous_rank
from leasecron.models.leases import LeaseRecord, lease_annotations
from leasecron.models.names import LABEL_JOB, job_lease_name
from leasecron.models.shards import (
    ANNOTATION_SHARDED,
    ShardGate,
    ShardRef,
    gate_of_group,
    gate_on,
    shard_lease_name,
    shard_of,
)
from leasecron.models.specs import ScheduledJob, job_label_value
from leasecron.runtime._services import Services
from leasecron.runtime._shardfences import ShardFloors

_log = get_logger("leasecron.runtime.handover")
_STEP = 1.0
"""Seconds between the replicas' turns to write a missing gate (rendezvous rank x this)."""
_RETRY_MAX = 5.0
_CONCURRENT_WRITES = 4
_EPSILON = timedelta(microseconds=1)


def owner_reference(job: ScheduledJob) -> dict[str, Any] | None:
    """The ownerReference that makes a Lease or JobRun part of the job (None without uid)."""
    if not job.uid:
        return None
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "name": job.name,
        "uid": job.uid,
    }


def lease_view(services: Services) -> LeaseView:
    """The process's watch-fed view of the group's Leases."""
    return LeaseView.shared(services.lease_cache, clock=services.clock)


def _lease_lock(
    services: Services,
    name: str,
    *,
    role: str,
    labels: dict[str, str],
    owner_reference: dict[str, Any] | None = None,
    view: LeaseView | None = None,
) -> LeaseLock:
    return LeaseLock.open(
        services.kube,
        view or lease_view(services),
        clock=services.clock,
        namespace=services.namespace,
        name=name,
        role=role,
        labels=labels,
        owner_reference=owner_reference,
    )


def job_lease_lock(
    services: Services, job: ScheduledJob, *, view: LeaseView | None = None
) -> LeaseLock:
    """The job's own Lease, as the per-job claim writes it."""
    labels = {LABEL_JOB: job_label_value(job.name)}
    owner = owner_reference(job)
    name = job_lease_name(job.name)
    return _lease_lock(
        services, name, role=ROLE_JOB, labels=labels, owner_reference=owner, view=view
    )


def shard_lease_lock(
    services: Services, gate: ShardGate, *, view: LeaseView | None = None
) -> LeaseLock:
    """The shard Lease a gate names, as the shard claim writes it."""
    labels = shard_labels(services.group, gate.ref.shard)
    return _lease_lock(services, gate.ref.lease, role=ROLE_SHARD, labels=labels, view=view)


async def take_back(services: Services, job: ScheduledJob, *, fallback_s: float) -> bool:
    """Undo the hand-over of `job`'s ticks to a shard Lease (its spec no longer asks for a
    shard claim here): True once its own Lease claims them again."""
    view = lease_view(services)
    done = await release_from_shard(
        job.name,
        job_lease_lock(services, job, view=view),
        lambda gate: (
            shard_lease_lock(services, gate, view=view)
            if gate_of_group(gate, services.group) is not None
            else None
        ),
        shard_floor=lambda gate: ShardFloors(services).floor(gate.ref),
        clock=services.clock,
        fallback_s=fallback_s,
    )
    if not done:
        _log.info("job still handed to its shard; taking it back later", job=job.name)
    return done


@dataclass(eq=False)
class _Wanted:
    job: ScheduledJob
    not_before: datetime
    at: float
    """Local monotonic time of the next attempt."""
    pause: float = _STEP


class Handovers:
    """The gates of the sharded jobs this replica runs: read from the view, written when
    missing."""

    def __init__(self, services: Services, *, shards: int, view: LeaseView) -> None:
        self._services = services
        self.shards = shards
        self.view = view
        self._parsed: dict[str, tuple[str | None, ShardGate | None]] = {}
        self._wanted: dict[str, _Wanted] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- reading ------------------------------------------------------------------------------

    def gate_of(self, name: str) -> ShardGate | None:
        """The gate on job `name`'s Lease as this replica sees it (watch-fed, no request)."""
        services = self._services
        seen = self.view.seen(services.namespace, job_lease_name(name))
        if seen is None:
            self._parsed.pop(name, None)
            return None
        version = seen.resource_version
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == version and version is not None:
            return cached[1]
        written = gate_on(seen.obj)
        gate = gate_of_group(written, self._services.group)
        if written is not None and gate is None:
            _log.warning(
                "the job's Lease hands it to a Lease that is no shard Lease of this group; "
                "no shard claim runs it",
                job=name,
                lease=written.lease,
                group=self._services.group,
            )
        self._parsed[name] = (version, gate)
        return gate

    def needs_gate(self, name: str) -> bool:
        """Whether job `name` (run here through shards, no valid gate seen) should be handed
        over again: its Lease is absent or was never claimed on (deleted, or created afresh
        by the operator), or its gate does not read or names no shard Lease of this group
        (corrupt). False for
        a Lease a per-job claim took the job's ticks back on."""
        seen = self.view.seen(self._services.namespace, job_lease_name(name))
        if seen is None:
            return True
        if ANNOTATION_SHARDED in lease_annotations(seen.obj):
            return self.gate_of(name) is None  # a gate that does not read, or not ours
        record = seen.observation.record
        return record.tick is None and record.free

    def target(self, name: str) -> ShardRef:
        """The shard Lease this replica hands job `name` to (by its own shard count)."""
        index = shard_of(name, shards=self.shards)
        lease = shard_lease_name(self._services.group, index, shards=self.shards)
        return ShardRef(lease=lease, shard=index, shards=self.shards)

    def ref_of(self, name: str) -> ShardRef:
        """The shard Lease job `name`'s ticks go to: its gate's, else this replica's target."""
        gate = self.gate_of(name)
        return gate.ref if gate is not None else self.target(name)

    async def wait_gate(self, name: str, *, within: float) -> ShardGate | None:
        """The job's gate, waiting up to `within` seconds for one to show up."""
        gate = self.gate_of(name)
        if gate is not None or within <= 0:
            return gate
        services = self._services
        await self.view.wait_for(
            services.namespace,
            job_lease_name(name),
            lambda: self.gate_of(name) is not None,
            timeout=within,
        )
        return self.gate_of(name)

    # --- writing ------------------------------------------------------------------------------

    def want(self, job: ScheduledJob, *, not_before: datetime) -> None:
        """Make sure `job`'s Lease hands its ticks to a shard: written by the replica ranked
        first for it at once, by the others after their turn if it is still missing."""
        services = self._services
        current = self._wanted.get(job.name)
        if current is not None:
            current.job = job
            return
        if self.gate_of(job.name) is not None:
            return
        members = services.membership.members() or [services.identity]
        rank = rendezvous_rank(f"gate/{job.name}", services.identity, members)
        at = services.clock.monotonic() + rank * _STEP
        self._wanted[job.name] = _Wanted(job=job, not_before=not_before, at=at)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="leasecron shard hand-overs"
            )

    def pending(self, name: str) -> bool:
        """Whether a gate for job `name` is still to be written by this replica."""
        return name in self._wanted

    def drop(self, name: str) -> None:
        self._wanted.pop(name, None)
        self._parsed.pop(name, None)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        clock = self._services.clock
        limit = asyncio.Semaphore(_CONCURRENT_WRITES)
        while self._wanted:
            self._changed.clear()
            now = clock.monotonic()
            for name in list(self._wanted):
                if self.gate_of(name) is not None:
                    self._wanted.pop(name, None)
            due = [w for w in self._wanted.values() if w.at <= now]
            if due:
                await asyncio.gather(*(self._write(w, limit) for w in due))
                continue
            if not self._wanted:
                return
            soonest = min(w.at for w in self._wanted.values())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.01, soonest - now))

    async def _write(self, wanted: _Wanted, limit: asyncio.Semaphore) -> None:
        services, job = self._services, wanted.job
        schedule = job.spec.parsed_schedule
        if schedule is None:
            self._wanted.pop(job.name, None)
            return
        target = self.target(job.name)

        def gate_for(record: LeaseRecord | None, token: int) -> ShardGate:
            start = gate_start(
                record,
                first_after=schedule.next_after,
                not_before=wanted.not_before - _EPSILON,
            )
            return ShardGate(ref=target, start=start, token=token)

        async with limit:
            gate = await hand_to_shard(
                job_lease_lock(services, job, view=self.view),
                gate_for=gate_for,
                floor=services.token_floor(job.name),
                clock=services.clock,
                fallback_s=job.spec.lock.at_most_for.total_seconds(),
                valid=lambda gate: gate_of_group(gate, services.group) is not None,
            )
        if gate is not None:
            self._wanted.pop(job.name, None)
            return
        wanted.at = services.clock.monotonic() + wanted.pause
        wanted.pause = min(wanted.pause * 2, _RETRY_MAX)
