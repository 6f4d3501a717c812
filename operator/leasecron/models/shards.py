"""Shards of a group's once-per-tick jobs (docs/design.md §5.3): which shard a job is in, the
name of a shard's Lease, and which jobs of a shard are due at one instant.

Pure functions: no I/O and no clock. A job's shard depends only on its name and the shard
count, so every replica with the same count computes the same assignment without talking
to the others. They do not claim anything: `coordination.shards.ShardLock` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasecron.models.names import dns_name
from leasecron.models.schedules import Schedule

DEFAULT_SHARDS = 32
"""Shards of a group whose record does not exist yet, unless the Scheduler is given another
count (the group record's count, once written, is what every replica follows)."""
MAX_SHARDS = 1024
SHARDS_PER_REPLICA = 5
"""Shards per replica from which an instant's runs spread within ±20 % of the mean whatever
the jobs (each replica claims first the whole or the whole plus one of its share; with fewer,
how even it is depends on how the jobs fall: docs/explanation/claim-engine.md)."""
LABEL_SHARD = "leasecron.dev/shard"
OWN_SHARD = "job"
"""`leasecron.dev/shard` of a job's own shard Lease (`own_lease_name`): of no shard count."""
ANNOTATION_MOVED = "leasecron.dev/moved."
"""On a shard Lease, `leasecron.dev/moved.<job>`: the job's ticks are claimed on its own Lease
now, from after the instant the value records (the Lease's high-water mark at the move)."""
_EPSILON = timedelta(microseconds=1)


def check_shards(shards: int) -> int:
    """`shards` when it is a valid shard count, else ValueError naming the value."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards ({shards!r}) must be a whole number from 1 to {MAX_SHARDS}")
    return shards


def shards_for(replicas: int) -> int:
    """The shard count to give a group run by `replicas` replicas: the smallest power of two
    with `SHARDS_PER_REPLICA` shards per replica, at least `DEFAULT_SHARDS`, at most
    `MAX_SHARDS`."""
    count = DEFAULT_SHARDS
    while count < SHARDS_PER_REPLICA * replicas and count < MAX_SHARDS:
        count *= 2
    return count


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


def own_lease_name(group: str, job: str) -> str:
    """The shard Lease of a job claimed on a Lease of its own (the group record lists it): a
    shard of one job, of no shard count."""
    return dns_name(f"leasecron-shard-{group}-job-{job}")


def shard_key(group: str, lease: str, instant: datetime) -> str:
    """The rendezvous key of one instant of one shard Lease (which replica goes first)."""
    return f"shard/{group}/{lease}/{instant.isoformat()}"


def due_at(schedule: Schedule, instant: datetime) -> bool:
    """Whether `schedule` has a tick at exactly `instant`."""
    return schedule.next_after(instant - _EPSILON) == instant


@dataclass(frozen=True, kw_only=True)
class ShardRef:
    """A shard Lease: `lease`, the Lease of shard `shard` of `shards`; for a job's own shard
    Lease, `job` names the job (`shard` is -1 and `shards` 0: of no count)."""

    lease: str
    shard: int
    shards: int
    job: str | None = None
