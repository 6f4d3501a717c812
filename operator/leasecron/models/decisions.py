"""Pure coordination decisions (docs/design.md §5): given what this replica has observed of a Lease,
what to write, if anything. No I/O and no clocks of their own: every time is passed in.

Owns the once-per-tick claim, keep-alive renew and release (atLeastFor), the election step
(acquire / renew / stand by, and when a leader must step down) and rendezvous ranking, which
picks one preferred replica per key so that only it writes at once and the others wait.

Expiry is never judged from the timestamps in the Lease (other replicas' clocks): a grant
expires `leaseDurationSeconds` after this replica first observed the record unchanged, on its
own monotonic clock, as client-go does. A record whose duration is unknown or corrupt is
treated as live for the caller's own configured duration (the conservative choice). These
functions decide; they do not promise the write will succeed: the conditional write (with the
observed resourceVersion) is what makes a decision taken on a stale view harmless.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.models.leases import RELEASED_DURATION_S, LeaseRecord, whole_seconds
from leasecron.models.vocabulary import SkipReason

SKIP_TAKEN = SkipReason.TAKEN
SKIP_LIVE_GRANT = SkipReason.LIVE_GRANT
SKIP_DEADLINE = SkipReason.DEADLINE
FUTURE_TICK_LIMIT = timedelta(days=1)
"""A recorded tick further than this ahead of our wall clock cannot come from a sane replica;
it is ignored (the record is corrupt) rather than blocking the job until that date."""


@dataclass(frozen=True, kw_only=True)
class Observation:
    """A Lease record and the local monotonic time this replica first saw that version."""

    record: LeaseRecord
    observed_at: float


@dataclass(frozen=True)
class Skip:
    """Do not claim; `reason` is one of the SKIP_* names (the SKIPS metric label)."""

    reason: str


@dataclass(frozen=True)
class Claim:
    """Write `record` (create when `create`, else PUT with record.resource_version).
    `replaces_orphan` is True when the version replaced is a grant of this very identity that
    the caller does not know (a claim whose reply was lost, a release that did not land)."""

    record: LeaseRecord
    create: bool
    replaces_orphan: bool = False

    @property
    def token(self) -> int:
        return self.record.transitions


@dataclass(frozen=True)
class Write:
    """A conditional PUT of `record` (renew of our own grant)."""

    record: LeaseRecord


@dataclass(frozen=True)
class Release:
    """A conditional PUT of `record`; `free_at` is the local monotonic time after which the
    Lease is free (None: `record` frees it now)."""

    record: LeaseRecord
    free_at: float | None


@dataclass(frozen=True)
class Lost:
    """The Lease no longer shows our grant: nothing may be written."""

    reason: str


@dataclass(frozen=True)
class Acquire:
    """Election: take the Lease (create when absent), a new term."""

    record: LeaseRecord
    create: bool


@dataclass(frozen=True)
class Renew:
    """Election: renew our own term."""

    record: LeaseRecord


@dataclass(frozen=True)
class StandBy:
    """Election: someone else holds a live grant; look again at `until` (local monotonic),
    or sooner when the Lease changes."""

    holder: str
    until: float


def expires_at(observation: Observation, *, fallback_s: float) -> float:
    """Local monotonic time at which the observed grant expires if nothing changes."""
    duration = observation.record.lease_duration_s
    return observation.observed_at + (duration if duration is not None else fallback_s)


def grant_live(observation: Observation | None, *, now_mono: float, fallback_s: float) -> bool:
    """True while the observed Lease has a holder and has not expired by local time."""
    if observation is None or observation.record.free:
        return False
    return now_mono < expires_at(observation, fallback_s=fallback_s)


def _recorded_tick(record: LeaseRecord, now_wall: datetime) -> datetime | None:
    if record.tick is not None and record.tick > now_wall + FUTURE_TICK_LIMIT:
        return None
    return record.tick


def orphaned(record: LeaseRecord | None, *, identity: str, known: Collection[int] | None) -> bool:
    """True when `record` shows a grant in `identity` whose token the caller has no record of
    (`known`: the tokens it runs or holds on purpose; None: the caller keeps no such record,
    so nothing is an orphan). Identities are unique per process
    incarnation, so such a grant can only be this process's own claim whose reply was lost,
    or a release that did not land: nothing runs under it, and it must not block the job."""
    return (
        known is not None
        and record is not None
        and not record.free
        and record.holder == identity
        and record.transitions not in known
    )


def decide_claim(
    *,
    current: Observation | None,
    tick: datetime,
    identity: str,
    config: LockConfig,
    now_mono: float,
    now_wall: datetime,
    name: str,
    namespace: str,
    starting_deadline: timedelta | None = None,
    known: Collection[int] | None = None,
    floor: int = 0,
    own: Collection[int] = (),
) -> Skip | Claim:
    """Once-per-tick claim of `tick`, docs/design.md §5.4 steps 1-4.

    `known` are the tokens of this identity's grants the caller still runs or holds (see
    `orphaned`); `floor` is the highest token ever on record for the job, so that a Lease
    created again never hands out a token already used. `own` are tokens of this identity's
    live grants that a new claim may replace (a shard's holder claims the shard's next instant
    while runs of the previous one still go; empty for a job's own Lease)."""
    record = current.record if current is not None else None
    # 1. The Lease already records this tick or a later one: taken. This, not atLeastFor,
    #    stops a replica whose wall clock runs late from running a tick again.
    recorded = _recorded_tick(record, now_wall) if record is not None else None
    if recorded is not None and recorded >= tick:
        return Skip(SKIP_TAKEN)
    # 8. Past tick + startingDeadline nobody starts the tick.
    if starting_deadline is not None and now_wall > tick + starting_deadline:
        return Skip(SKIP_DEADLINE)
    # 2. A live grant (the previous run is still going, or held for atLeastFor): a job never
    #    overlaps itself, whoever holds it. Our own orphan grant runs nothing: claim over it.
    orphan = orphaned(record, identity=identity, known=known)
    mine = record is not None and record.holder == identity and record.transitions in own
    if (
        not orphan
        and not mine
        and grant_live(current, now_mono=now_mono, fallback_s=config.lease_duration_s)
    ):
        return Skip(SKIP_LIVE_GRANT)
    # 3. Claim: holder = me, acquire = renew = now, duration = atMostFor, transitions + 1
    #    (above the job's token floor).
    previous = record.transitions if record is not None else 0
    claimed = LeaseRecord(
        name=name,
        namespace=namespace,
        holder=identity,
        lease_duration_s=config.lease_duration_s,
        acquire_time=now_wall,
        renew_time=now_wall,
        transitions=max(previous, floor) + 1,
        tick=tick,
        resource_version=record.resource_version if record is not None else None,
    )
    return Claim(claimed, create=record is None, replaces_orphan=orphan)


def lost_reason(current: LeaseRecord | None, *, identity: str, token: int) -> str | None:
    """The one "is it still ours?" check, for tick grants and election terms alike: None
    while `current` shows the grant `token` of `identity`, else why it does not."""
    if current is None:
        return "the Lease was deleted"
    if current.holder != identity:
        return f"the Lease is held by {current.holder or 'nobody'} now"
    if current.transitions != token:
        return f"the Lease shows token {current.transitions}, not {token}"
    return None


def _ours(current: LeaseRecord, *, identity: str, token: int) -> Lost | None:
    reason = lost_reason(current, identity=identity, token=token)
    return Lost(reason) if reason is not None else None


def decide_renew(
    *, current: LeaseRecord, identity: str, token: int, config: LockConfig, now_wall: datetime
) -> Write | Lost:
    """Keep-alive of a tick grant: same holder, token and tick; renewTime = now."""
    lost = _ours(current, identity=identity, token=token)
    if lost is not None:
        return lost
    renewed = replace(
        current, lease_duration_s=config.lease_duration_s, renew_time=now_wall, problems=()
    )
    return Write(renewed)


def free_record(current: LeaseRecord, *, now_wall: datetime) -> LeaseRecord:
    """client-go's release (ReleaseOnCancel): holder "", duration 1 s, acquire = renew = now;
    transitions and tick are kept."""
    return replace(
        current,
        holder="",
        lease_duration_s=RELEASED_DURATION_S,
        acquire_time=now_wall,
        renew_time=now_wall,
        problems=(),
    )


def decide_release(
    *,
    current: LeaseRecord,
    identity: str,
    token: int,
    config: LockConfig,
    acquired_mono: float,
    now_mono: float,
    now_wall: datetime,
) -> Release | Lost:
    """Release a tick grant honouring atLeastFor: held until max(now, acquire + atLeastFor)
    (as a grant of the remaining whole seconds), free at once when that is already past."""
    lost = _ours(current, identity=identity, token=token)
    if lost is not None:
        return lost
    remaining = acquired_mono + config.at_least_for.total_seconds() - now_mono
    if remaining <= 0:
        return Release(free_record(current, now_wall=now_wall), free_at=None)
    held = replace(
        current, lease_duration_s=whole_seconds(remaining), renew_time=now_wall, problems=()
    )
    return Release(held, free_at=now_mono + remaining)


def decide_election(
    *,
    current: Observation | None,
    leading: bool,
    identity: str,
    config: ElectionConfig,
    now_mono: float,
    now_wall: datetime,
    name: str,
    namespace: str,
    floor: int = 0,
    job: bool = False,
) -> Acquire | Renew | StandBy:
    """One step of client-go's tryAcquireOrRenew, without the I/O. `floor` is the highest
    token ever on record for the Lease's job: a new term's token is always above it. `job`:
    the Lease is a job's (its tokens are on record), whose first token is 1 whoever creates
    it: the operator creates it at the floor and the first owner takes floor + 1."""
    duration = config.lease_duration_s
    # 1. No Lease yet: create it holding it (transitions 0 as client-go; a job's just above
    #    its floor, which is 0 also when its only token so far was 0 and it was deleted).
    if current is None:
        record = LeaseRecord(
            name=name,
            namespace=namespace,
            holder=identity,
            lease_duration_s=duration,
            acquire_time=now_wall,
            renew_time=now_wall,
            transitions=floor + 1 if floor > 0 or job else 0,
        )
        return Acquire(record, create=True)
    record = current.record
    # 2. Someone else holds a grant that is live by our clock: stand by until it expires.
    if record.holder != identity and grant_live(current, now_mono=now_mono, fallback_s=duration):
        return StandBy(record.holder, until=expires_at(current, fallback_s=duration))
    # 3. Our own term: renew, keeping acquireTime and transitions.
    if record.holder == identity and leading:
        renewed = replace(
            record,
            lease_duration_s=duration,
            acquire_time=record.acquire_time or now_wall,
            renew_time=now_wall,
            problems=(),
        )
        return Renew(renewed)
    # 4. Free, expired, or ours from a term we already gave up: a new term, transitions + 1
    #    (a new token even when the holder string is unchanged, so fencing sees a new term).
    taken = replace(
        record,
        holder=identity,
        lease_duration_s=duration,
        acquire_time=now_wall,
        renew_time=now_wall,
        transitions=max(record.transitions, floor) + 1,
        problems=(),
    )
    return Acquire(taken, create=False)


def _weight(key: str, member: str) -> bytes:
    return hashlib.sha256(f"{key}\x00{member}".encode()).digest()


def rendezvous_rank(key: str, identity: str, members: Sequence[str]) -> int:
    """Highest-random-weight rank of `identity` for `key` among `members` (0 = preferred).

    Every replica computes the same order from the same member list, so for each key (a job
    and tick, or a single-owner job) exactly one replica goes first, and different keys spread
    over the replicas. An identity missing from `members` ranks after all of them.
    """
    ordered = rendezvous_order(key, members)
    try:
        return ordered.index(identity)
    except ValueError:
        return len(ordered)


def rendezvous_order(key: str, members: Collection[str]) -> list[str]:
    """`members` in rendezvous order for `key` (the first is rank 0)."""
    return sorted(set(members), key=lambda m: (_weight(key, m), m), reverse=True)


def balanced_first(
    weights: Mapping[str, int],
    able: Mapping[str, Collection[str]],
    previous: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Which member goes first for each key (a shard at an instant), so that the work of an
    instant spreads evenly and a member joining or leaving moves little more than its share.

    `weights[key]` is the key's work (the runs due on that shard), `able[key]` the members
    that may take it, `previous[key]` the member that claimed the key last (the shard
    Lease's claimer). A key stays with its previous member while that one is able; the other
    keys go, heaviest first (ties by name), to the first member of their rendezvous order
    whose load stays within the mean, or, when none can, to the least loaded. Then, while
    some member's load is outside `_SPREAD` of the mean, a key moves from the most loaded
    member to the least loaded able one that it brings closer (`_rebalance`; only a key
    placed anew, or to a member that kept none, while all are within `_BOUND`): a member
    joining takes its share from the others, a member leaving hands its own keys on, and
    nothing else moves unless the spread needs it. Every replica
    computes the same placement from the same inputs. How even it is depends on the shards
    per member (docs/explanation/claim-engine.md). A key with no able member is left out."""
    members = sorted({m for key in weights for m in able.get(key, ())})
    if not members:
        return {}
    previous = previous or {}
    load = dict.fromkeys(members, 0)
    placed: dict[str, str] = {}
    keys = sorted(weights, key=lambda k: (-weights[k], k))
    for key in keys:
        kept = previous.get(key)
        if kept is not None and kept in able.get(key, ()):
            load[kept] += weights[key]
            placed[key] = kept
    kept_keys = set(placed)
    mean = sum(weights.values()) / len(members)
    for key in keys:
        order = rendezvous_order(key, able.get(key, ()))
        if key not in placed and order:
            fits = [m for m in order if load[m] + weights[key] <= mean]
            chosen = fits[0] if fits else min(order, key=lambda m: load[m])
            load[chosen] += weights[key]
            placed[key] = chosen
    fresh = set(members) - {placed[key] for key in kept_keys}

    def free(key: str, member: str) -> bool:  # a key placed anew, or to a member that joined
        return key not in kept_keys or member in fresh

    _rebalance(weights, able, placed, load, mean=mean, free=free)
    return placed


_SPREAD = 0.1
"""How far from the mean a member's load may be before `balanced_first` moves keys."""
_BOUND = 0.2
"""How far from the mean a member's load may be before any key may move, not only a free one
(a key placed anew, or a move to a member that kept none: one that joined)."""


def _rebalance(
    weights: Mapping[str, int],
    able: Mapping[str, Collection[str]],
    placed: dict[str, str],
    load: dict[str, int],
    *,
    mean: float,
    free: Callable[[str, str], bool],
) -> None:
    """Move keys from the most loaded member to the least loaded able one, while a member is
    outside `_SPREAD` of the mean and a move narrows the gap: only moves that are `free(key,
    member)` while every member is within `_BOUND`, so that a change of members moves its
    own share and nothing else unless the spread needs it."""
    by_member: dict[str, list[str]] = {}
    for key in sorted(placed, key=lambda k: (-weights[k], k)):
        by_member.setdefault(placed[key], []).append(key)
    for _ in range(len(placed) * len(load)):  # each move narrows the spread: bounded
        high = max(load, key=lambda m: (load[m], m))
        low = min(load.values())
        if load[high] <= mean * (1 + _SPREAD) and low >= mean * (1 - _SPREAD):
            return
        bounded = load[high] <= mean * (1 + _BOUND) and low >= mean * (1 - _BOUND)
        allowed = free if bounded else lambda _k, _m: True
        keys = by_member.get(high, [])
        move = _narrowing_move(weights, able, keys, high, load, mean * (1 - _SPREAD), allowed)
        if move is None:
            return
        key, to = move
        by_member[high].remove(key)
        by_member.setdefault(to, []).append(key)
        by_member[to].sort(key=lambda k: (-weights[k], k))
        load[high] -= weights[key]
        load[to] += weights[key]
        placed[key] = to


def _narrowing_move(
    weights: Mapping[str, int],
    able: Mapping[str, Collection[str]],
    keys: list[str],
    high: str,
    load: Mapping[str, int],
    floor: float,
    allowed: Callable[[str, str], bool],
) -> tuple[str, str] | None:
    """Which of `high`'s keys (heaviest first) to move, and to the least loaded able member
    (`allowed` to take it) that would end up less loaded than `high` is now: the heaviest
    that leaves `high` at `floor` or above, else the heaviest at all; None when no key can
    move."""
    fallback: tuple[str, str] | None = None
    for key in keys:
        weight = weights[key]
        takers = [
            m
            for m in able.get(key, ())
            if m != high and load[m] + weight < load[high] and allowed(key, m)
        ]
        if not takers:
            continue
        move = key, min(takers, key=lambda m: (load[m], m))
        if load[high] - weight >= floor:
            return move
        fallback = fallback or move
    return fallback


def placed_rank(key: str, identity: str, members: Sequence[str], *, first: str | None) -> int:
    """`identity`'s rank for `key`: 0 for the member placed `first` (`balanced_first`),
    then the others in rendezvous order; plain `rendezvous_rank` without a placement or
    when `first` is no longer among `members`."""
    if first is None or first not in members:
        return rendezvous_rank(key, identity, members)
    if identity == first:
        return 0
    return 1 + rendezvous_rank(key, identity, [m for m in members if m != first])
