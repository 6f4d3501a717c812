"""The claim engine's shard Leases (`_shards.ShardTicks`): `ShardLocks`, one `ShardLock` per
shard Lease this replica claimed or looked at (made on first use, with the group record and
the handler of orphan grants it adopts), and `RetiredShards`, the shard Leases of an earlier
shard count (docs/design.md §5.9) that still show another replica's grant: a run of one of
their jobs may go on there, which the job's concurrencyPolicy waits for (§5.16).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from leasecron.coordination import Grant
from leasecron.coordination.shards import ShardLock, shard_config, shard_labels
from leasecron.models.groups import retired, shard_ref
from leasecron.models.names import LABEL_GROUP, LABEL_ROLE
from leasecron.models.shards import LABEL_SHARD, MAX_SHARDS, ShardRef, shard_lease_name
from leasecron.models.specs import ScheduledJob
from leasecron.models.vocabulary import Role
from leasecron.runtime._services import Services
from leasecron.runtime._shard_group import ShardGroup

_RETIRED_TTL = 0.5
"""Seconds the group's held retired shard Leases are read again after."""

Adopt = Callable[[ShardRef, Grant], Awaitable[None]]
"""Takes over an orphan grant of the shard Lease: runs its instant, then releases it."""


class ShardLocks:
    """The `ShardLock` of each shard Lease, made once."""

    def __init__(self, services: Services, group: ShardGroup, *, on_orphan: Adopt) -> None:
        self._services = services
        self._group = group
        self._on_orphan = on_orphan
        self._locks: dict[str, ShardLock] = {}

    def get(self, ref: ShardRef) -> ShardLock:
        lock = self._locks.get(ref.lease)
        if lock is None:
            services = self._services
            lock = ShardLock(
                services.kube,
                self._group.view,
                namespace=services.namespace,
                name=ref.lease,
                identity=services.identity,
                clock=services.clock,
                labels=shard_labels(services.group, ref),
                config=shard_config(services.tuning.shard_lease_s),
                group=self._group.record,
                on_orphan=functools.partial(self._on_orphan, ref),
            )
            self._locks[ref.lease] = lock
        return lock

    def made(self, ref: ShardRef) -> ShardLock | None:
        """The lock of `ref` if it was made, else None (it makes none)."""
        return self._locks.get(ref.lease)

    async def close(self) -> None:
        for lock in self._locks.values():
            await lock.close()


class RetiredShards:
    """The group's retired shard Leases that another replica holds."""

    def __init__(self, services: Services, locks: ShardLocks) -> None:
        self._services = services
        self._locks = locks
        self._retired_refs: dict[str, ShardRef | None] = {}
        self._retired_seen: tuple[float, list[ShardRef]] | None = None

    def elsewhere(self, job: ScheduledJob) -> ShardLock | None:
        """The retired shard Lease (of an earlier shard count) that claimed `job`'s ticks,
        when another replica holds a live grant on it: its runs may include one of `job`."""
        for ref in self._held():
            if shard_ref(self._services.group, job.name, shards=ref.shards) == ref:
                lock = self._locks.get(ref)
                if lock.held_by_other():
                    return lock
        return None

    def _held(self) -> list[ShardRef]:
        """The group's retired shard Leases that show another party's grant, read from the
        watched Leases at most every `_RETIRED_TTL` seconds (almost always none)."""
        services = self._services
        now = services.clock.monotonic()
        if self._retired_seen is not None and now - self._retired_seen[0] < _RETIRED_TTL:
            return self._retired_seen[1]
        held = []
        for obj in services.lease_cache.items():
            metadata = obj.get("metadata") or {}
            labels = metadata.get("labels") or {}
            if labels.get(LABEL_GROUP) != services.group or labels.get(LABEL_ROLE) != Role.SHARD:
                continue
            holder = (obj.get("spec") or {}).get("holderIdentity") or ""
            if not holder or holder == services.identity:
                continue
            if not retired(metadata.get("annotations") or {}):
                continue
            ref = self._ref(str(metadata.get("name")), labels.get(LABEL_SHARD, ""))
            if ref is not None:
                held.append(ref)
        self._retired_seen = (now, held)
        return held

    def _ref(self, name: str, index: str) -> ShardRef | None:
        """The ShardRef of a shard Lease named `name` with shard label `index`: its count is
        in its name (looked up once per name)."""
        if name in self._retired_refs:
            return self._retired_refs[name]
        found = None
        if index.isdigit():
            group, shard = self._services.group, int(index)
            for count in range(shard + 1, MAX_SHARDS + 1):
                if shard_lease_name(group, shard, shards=count) == name:
                    found = ShardRef(lease=name, shard=shard, shards=count)
                    break
        self._retired_refs[name] = found
        return found
