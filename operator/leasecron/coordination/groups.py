"""The group record (`models.groups`) in the cluster: `GroupRecord`, one replica's reading of
its group's record Lease and the only writer of its token ceiling; `change_shard_count`, the
deliberate change of a group's shard count.

A `GroupRecord` reads the record Lease (`leasecron-group-<group>`, role `group`) through the
process's shared `LeaseView`, so following it costs no request: `state` is what the newest
version says, and subscribers hear of a change of shard count or floor tick. It creates the
record with the configured shard count when there is none; a record that says another count
wins (logged once). A record that does not read is logged once per resourceVersion and never
overwritten: the last good state stays in force, and only claims that would need a higher
ceiling wait until it reads again. `reserve(token)` raises the ceiling (by `TOKEN_BLOCK`) with
a conditional update before a shard Lease may carry `token`.

`GroupRecord.move_job` gives a job a shard Lease of its own (a shard of one job, of no
count), once, so that whatever claims its ticks (a Scheduler that registered its handler, a
`job=` guard) claims them on one Lease: it marks the job moved on its shard Lease of the
current count (the instant that Lease had claimed: nothing of the job is claimed there any
more), creates the job's own Lease at that instant and token, and only then lists the job
in the record, conditionally on the count it marked: the job's ticks are never claimed on
two Leases, its token never goes down.

`change_shard_count` retires every shard Lease of the old count (a conditional write each, a
retired placeholder for a missing one), reads them back, and then writes the new count with
the highest instant they claimed as the floor tick and the ceiling at or above their highest
token: no instant is claimed on both counts and no token goes down.

Neither claims instants nor decides who runs what: `coordination.shards.ShardLock` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from leasecron._logs import get_logger
from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.resourcelocks import (
    LEASE_SELECTOR,
    ROLE_SHARD,
    LeaseLock,
    LeaseStoreLike,
)
from leasecron.coordination.shards import shard_labels
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, OutcomeUnknown, Unavailable
from leasecron.kube.leases import LeaseStore
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.decisions import FUTURE_TICK_LIMIT
from leasecron.models.groups import (
    ANNOTATION_RETIRED,
    ROLE_GROUP,
    TOKEN_BLOCK,
    GroupRecordError,
    GroupState,
    format_group,
    group_lease_name,
    moved_tick,
    own_ref,
    parse_group,
    replaced,
    retired,
)
from leasecron.models.leases import LeaseRecord, lease_annotations, parse_lease
from leasecron.models.names import LABEL_GROUP, format_tick
from leasecron.models.shards import ANNOTATION_MOVED, MAX_SHARDS, ShardRef, shard_lease_name

T = TypeVar("T")
WRITE_ATTEMPTS = 5
"""How many conditional writes of one Lease `reserve` and the count change try (re-reading
after each conflict or lost reply) before they give up with the last error."""
_MAYBE_WRITTEN = (OutcomeUnknown, TimeoutError)

Subscriber = Callable[[GroupState], None]
"""Told (on the loop thread) the record's state when its shard count, floor tick or jobs on
Leases of their own changed."""


def _record_lock(
    kube: Kube | LeaseStoreLike,
    cache: LeaseCache | LeaseView | None,
    *,
    clock: Clock,
    namespace: str,
    group: str,
) -> LeaseLock:
    """The lock of `group`'s record Lease."""
    return LeaseLock.open(
        kube,
        cache,
        clock=clock,
        namespace=namespace,
        name=group_lease_name(group),
        role=ROLE_GROUP,
        labels={LABEL_GROUP: group},
    )


def _check_count(shards: int, what: str) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"{what} ({shards!r}) must be a whole number from 1 to {MAX_SHARDS}")
    return shards


async def _get(lock: LeaseLock, timeout: float | None) -> Seen | None:  # noqa: ASYNC109
    """GET the Lease into the view; a request that timed out is an Unavailable."""
    try:
        return await lock.get(timeout=timeout)
    except TimeoutError as e:
        raise Unavailable(f"reading Lease {lock.name} timed out") from e


class GroupRecord:
    """One replica's reading of its group's record, and its writes of the token ceiling."""

    def __init__(
        self,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        *,
        namespace: str,
        group: str,
        identity: str,
        configured_shards: int,
        clock: Clock = SYSTEM_CLOCK,
        request_timeout: float | None = None,
        prepare_shards: bool = False,
    ) -> None:
        self.namespace = namespace
        self.prepare_shards = prepare_shards
        """Whether a record this replica creates comes with its shard Leases made ahead."""
        self.group = group
        self.identity = identity
        self.configured_shards = _check_count(configured_shards, "configured_shards")
        self._timeout = request_timeout
        self._kube = kube
        self._clock = clock
        self.lease = _record_lock(kube, cache, clock=clock, namespace=namespace, group=group)
        self._log = get_logger("leasecron.coordination").bind(
            group=group, lease=self.lease.name, namespace=namespace, identity=identity
        )
        self._last = GroupState(shards=self.configured_shards)
        self._version: str | None = None
        self._problem: str | None = None
        self._warned_counts: set[int] = set()
        self._subscribers: list[Subscriber] = []
        self._told = (self._last.placement, self._last.floor_tick)
        self._mutex = asyncio.Lock()
        self._unwatch = self.lease.view.watch(namespace, self.lease.name, self._changed)

    # --- reading ------------------------------------------------------------------------------

    @property
    def state(self) -> GroupState:
        """What the newest readable version of the record says (the configured count until
        one was read)."""
        self._read()
        return self._last

    @property
    def readable(self) -> bool:
        """Whether the newest known version of the record reads (a missing one does)."""
        self._read()
        return self._problem is None

    def _read(self) -> None:
        """Parse the newest version the view knows, once per resourceVersion."""
        seen = self.lease.observe()
        if seen is None:
            return  # gone or not read yet: the last good state stays in force
        if seen.resource_version is not None and seen.resource_version == self._version:
            return
        self._version = seen.resource_version
        try:
            state = parse_group(lease_annotations(seen.obj))
        except GroupRecordError as e:
            self._problem = str(e)
            self._log.error(
                "the group record does not read; following its last good state",
                resource_version=seen.resource_version,
                problem=self._problem,
                shards=self._last.shards,
            )
            return
        self._problem = None
        self._last = state
        if state.shards != self.configured_shards and state.shards not in self._warned_counts:
            self._warned_counts.add(state.shards)
            self._log.warning(
                "the group record's shard count differs from the configured one; following "
                "the record",
                recorded_shards=state.shards,
                configured_shards=self.configured_shards,
            )

    def _changed(self, obj: dict[str, Any] | None) -> None:
        state = self.state
        told = (state.placement, state.floor_tick)
        if told == self._told:
            return
        self._told = told
        for callback in list(self._subscribers):
            try:
                callback(state)
            except Exception:
                self._log.exception("group record subscriber failed")

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(state)` whenever the shard count, floor tick or the jobs on Leases
        of their own change; returns
        the unsubscribe."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    # --- requests -----------------------------------------------------------------------------

    async def start(self) -> GroupState:
        """Read the record, creating it with the configured shard count when there is none.
        Raises KubeError when the store cannot be read or written (retry Unavailable)."""
        seen = await _get(self.lease, self._timeout)
        if seen is None:
            highest = await self._highest_token_on_record()
            if not self.prepare_shards:
                await self._create(GroupState(shards=self.configured_shards, ceiling=highest))
            else:
                # One block reserved ahead, and the shard Leases made with it: the group's
                # first claims are plain conditional updates, not creates that each raise the
                # ceiling (one write after another, the replicas racing for the record).
                ceiling = highest + TOKEN_BLOCK
                state = GroupState(shards=self.configured_shards, ceiling=ceiling)
                if await self._create(state):
                    await self._create_shards(state, token=highest)
        state = self.state
        self._told = (state.placement, state.floor_tick)
        return state

    async def _highest_token_on_record(self) -> int:
        """The highest token any leasecron Lease of the namespace carries (shard Leases of an
        earlier record, job Leases of earlier versions): a record created now starts its
        ceiling there, so no token handed out later is below one already used."""
        if not isinstance(self._kube, Kube):
            return 0
        leases = await LeaseStore(self._kube).list(
            namespace=self.namespace, label_selector=LEASE_SELECTOR
        )
        return max((parse_lease(obj).transitions for obj in leases), default=0)

    async def move_job(self, job: str) -> GroupState:
        """Claim `job`'s ticks on a shard Lease of its own from now on (nothing when the record
        lists it already); the record's state after. Each step a conditional write, re-read
        after a conflict or a lost reply:

        1. mark the job moved on its shard Lease of the record's count (created so when missing),
           with the instant that Lease recorded, or the record's floor tick if later;
        2. create the job's own Lease with that instant and a token at the ceiling, or at the
           shard Lease's if higher (its first claim is above every token the job had), or
           raise its instant to it;
        3. list the job in the record, on the condition of a version with the count of step 1
           (another count: again from step 1).

        Raises GroupRecordError for a record that does not read, KubeError when the store
        fails (calling it again continues where it stopped)."""

        async def step(seen: Seen | None) -> GroupState:
            if seen is None:
                await self.start()
                raise Conflict(f"the group record {self.lease.name} was missing")
            state = parse_group(lease_annotations(seen.obj))
            if job in state.own:
                return state
            kube, clock, namespace, group = self._kube, self._clock, self.namespace, self.group
            hashed = _shard_lock(kube, clock, namespace, group, state.ref(group, job))
            tick, token = await _mark_moved(hashed, job)
            mark = max((t for t in (tick, state.floor_tick) if t is not None), default=None)
            own = _shard_lock(kube, clock, namespace, group, own_ref(group, job))
            await _own_lease(own, mark=mark, token=max(token, state.ceiling))
            after = replace(state, own=state.own | {job})
            await self.lease.annotate(format_group(after), base=seen, timeout=self._timeout)
            self._log.info("job moved to a shard Lease of its own", job=job, mark=mark)
            return after

        return await _until_written(self.lease, f"listing {job} in", step)

    async def refresh(self) -> GroupState:
        """GET the record into the view (before a shard Lease is created: its first token
        must be above the newest ceiling, not the one the watch delivered last)."""
        await _get(self.lease, self._timeout)
        return self.state

    async def _create(self, state: GroupState) -> bool:
        """Create the record holding `state` (True); someone else's (AlreadyExists, or a reply
        lost) is read instead (False)."""
        record = LeaseRecord(name=self.lease.name, namespace=self.namespace)
        try:
            await self.lease.create(record, annotations=format_group(state), timeout=self._timeout)
            self._log.info("created the group record", shards=state.shards, ceiling=state.ceiling)
            return True
        except (AlreadyExists, *_MAYBE_WRITTEN) as e:
            if await _get(self.lease, self._timeout) is None:
                raise Unavailable(f"the group record {self.lease.name} was not created") from e
            return False

    async def _create_shards(self, state: GroupState, *, token: int) -> None:
        """Create the free shard Leases of a record made just now, at `token` (the highest on
        record, within the ceiling). One that exists already, or cannot be made now, is left
        to the claims (they create a missing one above the ceiling)."""
        locks = _shard_locks(self._kube, self._clock, self.namespace, self.group, state.shards)

        async def create(lock: LeaseLock) -> None:
            record = LeaseRecord(name=lock.name, namespace=self.namespace, transitions=token)
            try:
                await lock.create(record, timeout=self._timeout)
            except KubeError as e:
                self._log.debug("shard Lease not created ahead", lease=lock.name, error=repr(e))

        await asyncio.gather(*(create(lock) for lock in locks))

    async def reserve(self, token: int) -> None:
        """Make the recorded ceiling at least `token` (raised to token + TOKEN_BLOCK), before
        any shard Lease of the group carries it. Raises GroupRecordError when the record does
        not read (it is not overwritten), KubeError when the store cannot be written."""
        if self.state.covers(token):  # the last good ceiling: ceilings only grow
            return
        async with self._mutex:  # one write serves every claim waiting here
            last: KubeError | None = None
            for _ in range(WRITE_ATTEMPTS):
                seen = self.lease.observe() or await _get(self.lease, self._timeout)
                if seen is None:
                    await self._create(self._last.raised(token))
                    continue
                self._read()
                if self._last.covers(token):
                    return
                if self._problem is not None:
                    raise GroupRecordError(self._problem)
                try:
                    await self.lease.annotate(
                        format_group(self._last.raised(token)), base=seen, timeout=self._timeout
                    )
                    return
                except Conflict as e:
                    last = e
                except _MAYBE_WRITTEN as e:
                    last = Unavailable(f"raising the token ceiling: {e!r}")
                await _get(self.lease, self._timeout)  # read back, then look again
            raise last or Conflict(f"the group record {self.lease.name} kept changing")

    def close(self) -> None:
        self._unwatch()
        self._subscribers.clear()


# --- changing the shard count -----------------------------------------------------------------


class ShardCountError(Exception):
    """The shard count cannot be changed as asked; the message says why and what to do."""


@dataclass(frozen=True, kw_only=True)
class ShardCountChange:
    """What `change_shard_count` found and did (with `dry_run`: would do)."""

    group: str
    before: GroupState
    after: GroupState
    retired: tuple[str, ...] = ()
    """The shard Leases of the old count, retired now (old ones may be deleted afterwards)."""
    placeholders: tuple[str, ...] = ()
    """Of those, the ones that did not exist and were created retired."""
    dry_run: bool = False


def _shard_locks(
    kube: Kube | LeaseStoreLike, clock: Clock, namespace: str, group: str, shards: int
) -> list[LeaseLock]:
    """The locks of the shard Leases of `group` with `shards` shards (a view of their own)."""
    return [
        _shard_lock(
            kube,
            clock,
            namespace,
            group,
            ShardRef(lease=shard_lease_name(group, i, shards=shards), shard=i, shards=shards),
        )
        for i in range(shards)
    ]


async def _until_written(
    lock: LeaseLock, what: str, step: Callable[[Seen | None], Awaitable[T]]
) -> T:
    """`step` on the Lease as read now (None: missing), read and tried again after a
    conflict, a create that met an existing Lease, or a lost reply."""
    last: KubeError | None = None
    for _ in range(WRITE_ATTEMPTS):
        seen = await _get(lock, None)
        try:
            return await step(seen)
        except (Conflict, AlreadyExists, OutcomeUnknown) as e:
            last = e
        except TimeoutError as e:
            last = Unavailable(f"{what} {lock.name}: {e!r}")
    raise last or Conflict(f"{lock.name} kept changing")


async def _retire(lock: LeaseLock, *, value: str) -> str:
    """Mark one shard Lease retired (created so when missing): "retired", "created" or
    "already"."""

    async def step(seen: Seen | None) -> str:
        if seen is None:
            record = LeaseRecord(name=lock.name, namespace=lock.namespace)
            await lock.create(record, annotations={ANNOTATION_RETIRED: value})
            return "created"
        if retired(lease_annotations(seen.obj)):
            return "already"
        await lock.annotate({ANNOTATION_RETIRED: value}, base=seen)
        return "retired"

    return await _until_written(lock, "retiring", step)


def _shard_lock(
    kube: Kube | LeaseStoreLike, clock: Clock, namespace: str, group: str, ref: ShardRef
) -> LeaseLock:
    """A lock of shard Lease `ref` (a view of its own)."""
    return LeaseLock.open(
        kube,
        None,
        clock=clock,
        namespace=namespace,
        name=ref.lease,
        role=ROLE_SHARD,
        labels=shard_labels(group, ref),
    )


async def _mark_moved(lock: LeaseLock, job: str) -> tuple[datetime | None, int]:
    """Step 1 of `move_job`: the instant the job's shard Lease recorded when it was marked
    moved (kept from an earlier mark), and its token then or since (no claim of the job
    lands on it after the mark)."""
    key = ANNOTATION_MOVED + job

    async def step(seen: Seen | None) -> tuple[datetime | None, int]:
        if seen is None:
            record = LeaseRecord(name=lock.name, namespace=lock.namespace)
            await lock.create(record, annotations={key: ""})
            return None, 0
        annotations, record = lease_annotations(seen.obj), seen.observation.record
        if key in annotations:
            return moved_tick(annotations, job), record.transitions
        await lock.annotate({key: format_tick(record.tick) if record.tick else ""}, base=seen)
        return record.tick, record.transitions

    return await _until_written(lock, f"marking {job} moved on", step)


async def _own_lease(lock: LeaseLock, *, mark: datetime | None, token: int) -> None:
    """Step 2 of `move_job`: the job's own Lease exists with its instant at `mark` at least
    (nothing claims on it before the record lists the job)."""

    async def step(seen: Seen | None) -> None:
        if seen is None:
            new = LeaseRecord(name=lock.name, namespace=lock.namespace, transitions=token)
            await lock.create(replace(new, tick=mark))
            return
        tick = seen.observation.record.tick
        if mark is not None and (tick is None or tick < mark):
            await lock.update(replace(seen.observation.record, tick=mark), base=seen)

    await _until_written(lock, "creating", step)


async def change_shard_count(
    kube: Kube | LeaseStoreLike,
    *,
    namespace: str,
    group: str,
    shards: int,
    dry_run: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    report: Callable[[str], None] = lambda _: None,
) -> ShardCountChange:
    """Change `group`'s shard count to `shards`, in numbered steps (each told to `report`):

    1. read the record (its count n); nothing to do when n is `shards`;
    2. mark every shard Lease of count n retired (no instant is claimed on it any more);
    3. read them back: the floor tick is the highest instant they claimed, the ceiling at
       least their highest token;
    4. write the record: `shards` shards, that floor tick and ceiling.

    Raises ShardCountError (a message for the user), GroupRecordError for a record that does
    not read, KubeError when the store fails (running it again continues where it stopped).
    """
    _check_count(shards, "shards")
    record_lock = _record_lock(kube, None, clock=clock, namespace=namespace, group=group)
    before = await _read_count(record_lock, namespace=namespace, group=group)
    report(f"1. group {group!r}: {before.shards} shards, token ceiling {before.ceiling}")
    if before.shards == shards:
        report(f"   already {shards} shards: nothing to do")
        return ShardCountChange(group=group, before=before, after=before, dry_run=dry_run)
    await _refuse_left_leases(_shard_locks(kube, clock, namespace, group, shards), shards)
    old = _shard_locks(kube, clock, namespace, group, before.shards)
    if dry_run:
        report(f"2. would retire the {len(old)} shard Leases of {before.shards} shards")
        report(f"3. would write {shards} shards, the highest instant they claimed as floor")
        return ShardCountChange(group=group, before=before, after=before, dry_run=True)
    placeholders = await _retire_all(old, shards=shards, report=report)
    after = await _claimed_on(old, before=before, shards=shards, clock=clock)
    floor = format_tick(after.floor_tick) if after.floor_tick else "none"
    report(f"3. highest instant claimed: {floor}; token ceiling: {after.ceiling}")
    after = await _write_count(record_lock, before=before, after=after)
    report(f"4. group {group!r}: {after.shards} shards, floor tick {floor}")
    return ShardCountChange(
        group=group,
        before=before,
        after=after,
        retired=tuple(lock.name for lock in old),
        placeholders=tuple(placeholders),
    )


async def _read_count(lock: LeaseLock, *, namespace: str, group: str) -> GroupState:
    """Step 1: the group's record as it reads now. Raises ShardCountError when there is none,
    GroupRecordError when it does not read."""
    seen = await _get(lock, None)
    if seen is None:
        raise ShardCountError(
            f"group {group!r} has no record in namespace {namespace} (Lease "
            f"{lock.name}); a replica of the group creates it when it starts"
        )
    return parse_group(lease_annotations(seen.obj))


async def _retire_all(
    locks: list[LeaseLock], *, shards: int, report: Callable[[str], None]
) -> list[str]:
    """Step 2: retire every shard Lease of the old count, one after another (no instant is
    claimed on one once it is retired); the names of those created retired as placeholders."""
    placeholders = []
    for lock in locks:
        outcome = await _retire(lock, value=f"replaced by {shards} shards")
        if outcome == "created":
            placeholders.append(lock.name)
        report(f"2. {lock.name}: {outcome}")
    return placeholders


async def _claimed_on(
    locks: list[LeaseLock], *, before: GroupState, shards: int, clock: Clock
) -> GroupState:
    """Step 3: read the retired shard Leases back (no claim lands on them any more) and make
    the record of `shards` shards from them: their highest claimed instant as the floor tick
    (one further ahead than FUTURE_TICK_LIMIT is corrupt, not claimed), the ceiling at or
    above their highest token."""
    records = []
    for lock in locks:
        seen = await _get(lock, None)
        if seen is not None:
            records.append(seen.observation.record)
    limit = clock.now() + FUTURE_TICK_LIMIT
    ticks = [r.tick for r in records if r.tick is not None and r.tick <= limit]
    return replaced(before, shards=shards, ticks=ticks, tokens=[r.transitions for r in records])


async def _refuse_left_leases(locks: list[LeaseLock], shards: int) -> None:
    """Shard Leases of the new count left from an earlier change of count carry tokens below
    the ceiling and are retired: they must go before the count returns to them."""
    left = [lock.name for lock in locks if await _get(lock, None) is not None]
    if left:
        namespace = locks[0].namespace
        shown = " ".join(left[:8]) + (" ..." if len(left) > 8 else "")
        raise ShardCountError(
            f"{len(left)} shard Leases of {shards} shards are left from an earlier count; "
            f"delete them first: kubectl delete lease -n {namespace} {shown}"
        )


async def _write_count(lock: LeaseLock, *, before: GroupState, after: GroupState) -> GroupState:
    """Step 4: write `after`, conditionally; a ceiling raised and jobs moved to Leases of
    their own meanwhile are kept. Raises ShardCountError when someone else changed the count
    meanwhile."""

    async def step(seen: Seen | None) -> GroupState:
        if seen is None:
            raise ShardCountError(f"the group record {lock.name} was deleted meanwhile")
        current = parse_group(lease_annotations(seen.obj))
        if current.shards == after.shards and current.floor_tick == after.floor_tick:
            return current  # our lost reply landed
        if current.shards != before.shards:
            raise ShardCountError(
                f"the shard count was changed to {current.shards} meanwhile; nothing written"
            )
        written = replace(
            after, ceiling=max(after.ceiling, current.ceiling), own=after.own | current.own
        )
        await lock.annotate(format_group(written), base=seen)
        return written

    return await _until_written(lock, "writing", step)
