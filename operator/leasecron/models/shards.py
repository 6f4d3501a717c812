"""Shards of a group's once-per-tick jobs (docs/design.md §5.3): which jobs are claimed through a
shard, which shard a job is in, the name of a shard's Lease, and which jobs of a shard are
due at one instant.

Pure functions: no I/O and no clock. A job's shard depends only on its name and the shard
count, so every replica with the same count computes the same assignment without talking
to the others. They do not claim anything: `coordination.shards.ShardLock` does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from leasecron.models._enums import Bucket, Coordination, StoreUnavailablePolicy
from leasecron.models.leases import lease_annotations
from leasecron.models.names import dns_name, format_tick, parse_tick
from leasecron.models.schedules import Schedule

DEFAULT_SHARDS = 16
"""Shards of a group whose record does not exist yet, unless the Scheduler is given another
count (the group record's count, once written, is what every replica follows)."""
MAX_SHARDS = 1024
LABEL_SHARD = "leasecron.dev/shard"
_EPSILON = timedelta(microseconds=1)


def check_shards(shards: int) -> int:
    """`shards` when it is a valid shard count, else ValueError naming the value."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards ({shards!r}) must be a whole number from 1 to {MAX_SHARDS}")
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


def shard_key(group: str, lease: str, instant: datetime) -> str:
    """The rendezvous key of one instant of one shard Lease (which replica goes first)."""
    return f"shard/{group}/{lease}/{instant.isoformat()}"


def due_at(schedule: Schedule, instant: datetime) -> bool:
    """Whether `schedule` has a tick at exactly `instant`."""
    return schedule.next_after(instant - _EPSILON) == instant


# --- handing a job's ticks from its own Lease to a shard Lease and back ---------------------

ANNOTATION_SHARDED = "leasecron.dev/sharded"
"""On a job's Lease: from which tick on, and on which shard Lease, its ticks are claimed."""
ANNOTATION_RELEASED = "leasecron.dev/released"
"""On a shard Lease: the handovers (job -> `from` tick) it no longer runs."""


@dataclass(frozen=True, kw_only=True)
class ShardRef:
    """A shard Lease: `lease`, the Lease of shard `shard` of `shards`."""

    lease: str
    shard: int
    shards: int


@dataclass(frozen=True, kw_only=True)
class ShardGate:
    """A job's ticks from `start` on belong to the shard Lease `ref`; `token` is the job
    Lease's fencing token when they were handed over."""

    ref: ShardRef
    start: datetime
    token: int = 0

    @property
    def lease(self) -> str:
        return self.ref.lease

    def covers(self, tick: datetime) -> bool:
        """Whether `tick` is claimed on the shard Lease rather than the job's own."""
        return tick >= self.start


def _annotation(annotations: object, key: str) -> object:
    if not isinstance(annotations, Mapping):
        return None
    text = annotations.get(key)
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_gate(annotations: Mapping[str, object]) -> ShardGate | None:
    """The handover a job Lease's annotations record; None when there is none or it does not
    parse (then no shard runs the job: only its own Lease, which is the safe side)."""
    raw = _annotation(annotations, ANNOTATION_SHARDED)
    if not isinstance(raw, dict):
        return None
    lease, shard, shards, start, token = (
        raw.get("lease"),
        raw.get("shard"),
        raw.get("shards"),
        raw.get("from"),
        raw.get("token", 0),
    )
    if not (isinstance(lease, str) and lease and isinstance(start, str)):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (shard, shards, token)):
        return None
    assert isinstance(shard, int) and isinstance(shards, int) and isinstance(token, int)
    if not 0 <= shard < shards <= MAX_SHARDS or token < 0:
        return None
    try:
        tick = parse_tick(start)
    except ValueError:
        return None
    ref = ShardRef(lease=lease, shard=shard, shards=shards)
    return ShardGate(ref=ref, start=tick, token=token)


def gate_of_group(gate: ShardGate | None, group: str) -> ShardGate | None:
    """`gate` when it names a shard Lease of `group` (the Lease its shard and count give),
    else None: a gate naming any other Lease is corrupt, and no shard claim runs the job."""
    if gate is None:
        return None
    expected = shard_lease_name(group, gate.ref.shard, shards=gate.ref.shards)
    return gate if gate.ref.lease == expected else None


def gate_on(obj: object, *, group: str | None = None) -> ShardGate | None:
    """The gate a raw job Lease carries (None: none, or it does not parse); with `group`,
    only one that names a shard Lease of that group."""
    gate = parse_gate(lease_annotations(obj))
    return gate if group is None else gate_of_group(gate, group)


def format_gate(gate: ShardGate) -> str:
    return json.dumps(
        {
            "lease": gate.ref.lease,
            "shard": gate.ref.shard,
            "shards": gate.ref.shards,
            "from": format_tick(gate.start),
            "token": gate.token,
        },
        separators=(",", ":"),
        sort_keys=True,
    )


def parse_released(annotations: Mapping[str, object]) -> dict[str, datetime] | None:
    """The handovers a shard Lease no longer runs (job -> the handover's `from` tick); None
    when the annotation is there but does not read entirely: then the shard runs no job at
    all, since a job it was told to let go of could be among the unreadable entries."""
    if annotations.get(ANNOTATION_RELEASED) is None:
        return {}
    raw = _annotation(annotations, ANNOTATION_RELEASED)
    if not isinstance(raw, dict):
        return None
    released: dict[str, datetime] = {}
    for job, value in raw.items():
        try:
            released[str(job)] = parse_tick(str(value))
        except ValueError:
            return None
    return released


def format_released(released: Mapping[str, datetime]) -> str:
    encoded = {job: format_tick(tick) for job, tick in sorted(released.items())}
    return json.dumps(encoded, separators=(",", ":"))


def runs_under_shard(
    job: str,
    tick: datetime,
    *,
    gate: ShardGate | None,
    lease: str,
    released: Mapping[str, datetime] | None,
    token: int,
) -> bool:
    """Whether the holder of claim `token` on shard Lease `lease` (whose record showed
    `released`) runs `job`'s `tick`: the job's Lease handed it to this shard Lease from a tick
    at or before `tick`, the shard Lease has not let go of that hand-over, and the claim's
    token is above the one the job had on its own Lease (a claim written before this replica
    saw the gate may not be; the next instant's is)."""
    return (
        gate is not None
        and released is not None
        and gate.lease == lease
        and gate.covers(tick)
        and released.get(job) != gate.start
        and token > gate.token
    )
