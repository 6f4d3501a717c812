"""The group record (docs/design.md, "The group record"): one Lease per group that holds what
every replica of the group must agree on, in annotations:

- `leasecron.dev/shards`: the group's shard count. Every replica follows it, whatever count
  it was configured with (a replica configured otherwise logs it and follows).
- `leasecron.dev/token-ceiling`: no shard Lease of the group ever carries a token above it.
  A claim whose token would pass it raises it first (by `TOKEN_BLOCK`, so one write serves
  many claims). A shard Lease created again (deleted by hand, or new after a change of shard
  count) starts above the ceiling: a job's token never decreases, without reading any run
  record.
- `leasecron.dev/floor-tick`: instants at or before it are taken on every shard Lease of the
  current count (written when the count changes: the highest instant the old shards claimed),
  so no instant is claimed on the old shard Leases and again on the new ones.
- `leasecron.dev/own-leases`: a JSON list of the jobs claimed on a shard Lease of their own
  (`own_lease_name`: a shard of one job, of no count), whatever the count. A job is moved
  there once (`coordination.groups.GroupRecord.move_job`) and stays.

And on a shard Lease, `leasecron.dev/retired`: the shard count it belongs to was replaced;
no instant is claimed on it any more.

Pure values and functions: no I/O. `coordination.groups` reads and writes the record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from leasecron.models.leases import lease_annotations
from leasecron.models.names import dns_name, format_tick, parse_tick
from leasecron.models.shards import (
    ANNOTATION_MOVED,
    DEFAULT_SHARDS,
    MAX_SHARDS,
    ShardRef,
    own_lease_name,
    shard_lease_name,
    shard_of,
)
from leasecron.models.vocabulary import Role

ROLE_GROUP = Role.GROUP
ANNOTATION_SHARDS = "leasecron.dev/shards"
ANNOTATION_TOKEN_CEILING = "leasecron.dev/token-ceiling"
ANNOTATION_FLOOR_TICK = "leasecron.dev/floor-tick"
ANNOTATION_RETIRED = "leasecron.dev/retired"
ANNOTATION_OWN_LEASES = "leasecron.dev/own-leases"
TOKEN_BLOCK = 10_000
"""How far one write raises the token ceiling: one group-record write per this many claims."""
MAX_TOKEN = 2**31 - 1
"""leaseTransitions is an int32."""


class GroupRecordError(ValueError):
    """A group record whose annotations do not read; the message names the field and value."""


Placement = tuple[int, frozenset[str]]
"""The shard count and the jobs on Leases of their own: what places a job on a shard Lease."""


@dataclass(frozen=True, kw_only=True)
class GroupState:
    """What the group record says."""

    shards: int
    ceiling: int = 0
    floor_tick: datetime | None = None
    own: frozenset[str] = field(default_factory=frozenset)
    """The jobs claimed on a shard Lease of their own (`own_ref`)."""

    def ref(self, group: str, job: str) -> ShardRef:
        """The shard Lease that claims `job`'s ticks under this record."""
        if job in self.own:
            return own_ref(group, job)
        return shard_ref(group, job, shards=self.shards)

    @property
    def placement(self) -> Placement:
        """What decides which shard Lease claims a job's ticks: equal placements, equal refs."""
        return self.shards, self.own

    def covers(self, token: int) -> bool:
        """Whether a claim may write `token` without raising the ceiling first."""
        return token <= self.ceiling

    def raised(self, token: int) -> GroupState:
        """The record with its ceiling raised far enough for `token` and the next claims."""
        if token > MAX_TOKEN:
            raise GroupRecordError(f"token {token} is above the largest leaseTransitions")
        ceiling = min(MAX_TOKEN, max(self.ceiling, token + TOKEN_BLOCK))
        return replace(self, ceiling=ceiling)

    def takes(self, tick: datetime) -> bool:
        """Whether `tick` counts as taken on every shard Lease of the current count (it is at
        or before the floor tick: claimed, if at all, on the shard Leases of an earlier count)."""
        return self.floor_tick is not None and tick <= self.floor_tick

    @property
    def first_token(self) -> int:
        """The lowest token a shard Lease created now may carry: above every token any shard
        Lease of the group ever carried."""
        return self.ceiling + 1


def replaced(
    state: GroupState,
    *,
    shards: int,
    ticks: Iterable[datetime | None],
    tokens: Iterable[int],
) -> GroupState:
    """The record after the shard Leases of `state`'s count were all retired and read back:
    `shards` shards, the floor tick at the highest instant they (or an earlier count) claimed,
    the ceiling at least the highest token they carry. Raises GroupRecordError for a count
    out of range."""
    if isinstance(shards, bool) or not 1 <= shards <= MAX_SHARDS:
        raise GroupRecordError(f"shards ({shards!r}) must be a whole number from 1 to {MAX_SHARDS}")
    claimed = [t for t in (state.floor_tick, *ticks) if t is not None]
    ceiling = max([state.ceiling, *tokens])
    if ceiling > MAX_TOKEN:
        raise GroupRecordError(f"token {ceiling} is above the largest leaseTransitions")
    return GroupState(
        shards=shards, ceiling=ceiling, floor_tick=max(claimed, default=None), own=state.own
    )


def group_lease_name(group: str) -> str:
    return dns_name(f"leasecron-group-{group}")


def shard_ref(group: str, job: str, *, shards: int) -> ShardRef:
    index = shard_of(job, shards=shards)
    return ShardRef(lease=shard_lease_name(group, index, shards=shards), shard=index, shards=shards)


def own_ref(group: str, job: str) -> ShardRef:
    """The shard Lease of `job` once it is claimed on a Lease of its own."""
    return ShardRef(lease=own_lease_name(group, job), shard=-1, shards=0, job=job)


def moved_jobs(annotations: Mapping[str, object]) -> frozenset[str]:
    """The jobs a shard Lease says moved to Leases of their own."""
    prefix = ANNOTATION_MOVED
    return frozenset(key[len(prefix) :] for key in annotations if key.startswith(prefix))


def moved_tick(annotations: Mapping[str, object], job: str) -> datetime | None:
    """The instant a shard Lease had recorded when `job` moved from it (its ticks up to it
    were claimed here); None when it recorded none (or it does not read)."""
    try:
        return parse_tick(str(annotations.get(ANNOTATION_MOVED + job) or ""))
    except ValueError:
        return None


def _whole(annotations: Mapping[str, object], key: str, *, low: int, high: int) -> int:
    raw = annotations.get(key)
    try:
        value = int(str(raw))
    except ValueError:
        raise GroupRecordError(f"{key} ({raw!r}) is not a whole number") from None
    if not low <= value <= high:
        raise GroupRecordError(f"{key} ({raw!r}) must be from {low} to {high}")
    return value


def parse_group(annotations: Mapping[str, object]) -> GroupState:
    """The record's state, or GroupRecordError naming the annotation and its value."""
    shards = _whole(annotations, ANNOTATION_SHARDS, low=1, high=MAX_SHARDS)
    ceiling = 0
    if annotations.get(ANNOTATION_TOKEN_CEILING) is not None:
        ceiling = _whole(annotations, ANNOTATION_TOKEN_CEILING, low=0, high=MAX_TOKEN)
    floor_tick = None
    raw_tick = annotations.get(ANNOTATION_FLOOR_TICK)
    if raw_tick is not None:
        try:
            floor_tick = parse_tick(str(raw_tick))
        except ValueError:
            raise GroupRecordError(
                f"{ANNOTATION_FLOOR_TICK} ({raw_tick!r}) is not an RFC 3339 time"
            ) from None
    return GroupState(shards=shards, ceiling=ceiling, floor_tick=floor_tick, own=_own(annotations))


def _own(annotations: Mapping[str, object]) -> frozenset[str]:
    raw = annotations.get(ANNOTATION_OWN_LEASES)
    if raw is None:
        return frozenset()
    try:
        names = json.loads(str(raw))
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise GroupRecordError(
            f"{ANNOTATION_OWN_LEASES} ({raw!r}) is not a JSON list of ScheduledJob names"
        )
    return frozenset(names)


def format_group(state: GroupState) -> dict[str, str | None]:
    """The annotations that record `state` (None: remove)."""
    return {
        ANNOTATION_SHARDS: str(state.shards),
        ANNOTATION_TOKEN_CEILING: str(state.ceiling),
        ANNOTATION_FLOOR_TICK: format_tick(state.floor_tick) if state.floor_tick else None,
        ANNOTATION_OWN_LEASES: json.dumps(sorted(state.own)) if state.own else None,
    }


def retired(annotations: Mapping[str, object]) -> bool:
    """Whether a shard Lease's annotations say its shard count was replaced."""
    return annotations.get(ANNOTATION_RETIRED) is not None


def recorded_state(raw: object | None) -> GroupState:
    """What a raw group record Lease says for someone who only reads it (the operator, the
    CLI): its state, or `DEFAULT_SHARDS` (and no floor) while there is no record or it does
    not read (the replicas then claim nothing that needs it)."""
    if raw is not None:
        try:
            return parse_group(lease_annotations(raw))
        except GroupRecordError:
            pass
    return GroupState(shards=DEFAULT_SHARDS)
