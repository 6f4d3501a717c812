"""Shards of a group's once-per-tick jobs (docs/claims.md): which jobs are claimed through a
shard, which shard a job is in, the name of a shard's Lease, and which jobs of a shard are
due at one instant.

Pure functions: no I/O and no clock. A job's shard depends only on its name and the shard
count, so every replica with the same count computes the same assignment without talking
to the others. They do not claim anything: `coordination.shards.ShardLock` does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasecron.models._enums import Bucket, Coordination, StoreUnavailablePolicy
from leasecron.models.names import dns_name
from leasecron.models.schedules import Schedule

DEFAULT_SHARDS = 16
"""Shards per group unless the Scheduler is given another count (0: no shards)."""
MAX_SHARDS = 1024
LABEL_SHARD = "leasecron.dev/shard"
_EPSILON = timedelta(microseconds=1)


def check_shards(shards: int) -> int:
    """`shards` when it is a valid shard count (0 turns shard claims off), else ValueError
    naming the value."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 0 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards ({shards!r}) must be a whole number from 0 to {MAX_SHARDS}")
    return shards


@dataclass(frozen=True, kw_only=True)
class ClaimTraits:
    """What decides a once-per-tick job's claim model (a view of its spec)."""

    bucket: Bucket
    coordination: Coordination
    keep_alive: bool
    at_least_for: timedelta
    on_store_unavailable: StoreUnavailablePolicy


def claims_through_shard(traits: ClaimTraits, *, shards: int) -> bool:
    """Whether a job's ticks are claimed on its group's shard Lease rather than its own.

    Only once-per-tick `coordination: Lock` jobs, and of those only the ones that do not
    need a Lease of their own: `lock.keepAlive: false` (a run bounded by atMostFor, not
    renewed on its own), `lock.atLeastFor: 0s` (nothing to hold after the run) and
    `onStoreUnavailable: Skip` (RunLocally decides per job whether another replica has the
    tick). Every other job keeps the per-job claim, as does every job when `shards` is 0.
    """
    return (
        shards > 0
        and traits.bucket is Bucket.ONCE_PER_TICK
        and traits.coordination is Coordination.LOCK
        and not traits.keep_alive
        and traits.at_least_for <= timedelta(0)
        and traits.on_store_unavailable is StoreUnavailablePolicy.SKIP
    )


def shard_of(job: str, *, shards: int) -> int:
    """The shard (0 .. shards-1) of the job named `job`: a stable hash of the name."""
    if shards < 1:
        raise ValueError(f"shards ({shards}) must be at least 1 to place a job")
    digest = hashlib.sha256(job.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_lease_name(group: str, index: int, *, shards: int) -> str:
    """The Lease of shard `index` of `group` with `shards` shards. The count is part of the
    name: replicas configured with different counts never share a shard Lease."""
    return dns_name(f"leasecron-shard-{group}-{shards}-{index}")


def shard_key(group: str, index: int, instant: datetime) -> str:
    """The rendezvous key of one instant of one shard (which replica goes first)."""
    return f"shard/{group}/{index}/{instant.isoformat()}"


def due_at(schedule: Schedule, instant: datetime) -> bool:
    """Whether `schedule` has a tick at exactly `instant`."""
    return schedule.next_after(instant - _EPSILON) == instant


def jobs_due(
    schedules: Mapping[str, Schedule], instant: datetime, *, shard: int, shards: int
) -> list[str]:
    """Names of the jobs in `schedules` that are in `shard` and have a tick at `instant`,
    sorted: what the holder of that shard instant runs."""
    return sorted(
        name
        for name, schedule in schedules.items()
        if shard_of(name, shards=shards) == shard and due_at(schedule, instant)
    )


def group_by_shard(
    due: Iterable[tuple[str, datetime]], *, shards: int
) -> dict[tuple[int, datetime], list[str]]:
    """Jobs due (name, tick) grouped by (shard, tick): one claim per key."""
    groups: dict[tuple[int, datetime], list[str]] = {}
    for name, tick in due:
        groups.setdefault((shard_of(name, shards=shards), tick), []).append(name)
    return {key: sorted(names) for key, names in sorted(groups.items())}
