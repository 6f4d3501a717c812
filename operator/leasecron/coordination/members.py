"""`MemberLease`: a replica's membership Lease in its group, written through coordination like
every other Lease of leasecron, and the pure rules about members (`member_annotations`,
`live_members`, `member_selector`).

A member Lease is named `member_lease_name(group, identity)`, labelled with its group and
`role=member`, holds its replica, and is annotated with the JSON list of its handler names. It
is written through its `LeaseLock` (as every Lease of leasecron), create-or-replace at the
version this replica wrote last; a conflict, a NotFound or a reply that was lost (the write
may have landed) is answered by reading it back and writing again. A member is live while
its Lease changed less than its leaseDurationSeconds ago by the reader's monotonic clock (the
same rule as any grant, docs/design.md §5.2).

A process may keep one Lease name from several places: a Scheduler's `Membership` and the
member Leases of its job guards (`runtime._guard_members`, one per event loop with guards)
when they run one group with one identity. A guards' `MemberLease` is a *guest*: of the
MemberLeases of one name in a process one writes (its *host*: a Scheduler's when there is
one, else the first guest), with the handlers of every guest; the others write nothing. When
the host stops while a guest remains, it leaves the Lease in place and a guest writes it from
its next renewal on. Two that are not guests (two Schedulers with one identity) do not share:
they are what `_check_identity` reports.

What it does not promise: that two replicas see the same member list at every instant.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from leasecron._logs import get_logger
from leasecron._metrics import IDENTITY_CONFLICTS
from leasecron.coordination.resourcelocks import LeaseLock, LeaseStoreLike
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, NotFound, OutcomeUnknown
from leasecron.models.clocks import Clock
from leasecron.models.decisions import Observation, grant_live
from leasecron.models.leases import (
    LeaseRecord,
    lease_annotations,
    parse_lease,
)
from leasecron.models.names import (
    ANNOTATION_GUARD_HANDLERS,
    ANNOTATION_HANDLERS,
    ANNOTATION_INCARNATION,
    LABEL_GROUP,
    LABEL_ROLE,
    member_lease_name,
)
from leasecron.models.vocabulary import Role

_log = get_logger("leasecron.coordination.members")
ROLE_MEMBER = Role.MEMBER
_WRITES = 3
_REPORT_EVERY = 60
"""An identity conflict is logged the first time and then every this many times."""


_Key = tuple[str, str]
"""(namespace, Lease name) of a member Lease this process keeps."""
_shared = threading.Lock()
_hosts: dict[_Key, MemberLease] = {}
"""The MemberLease (not a guest) that wrote each Lease of this process first and keeps it."""
_guests: dict[_Key, dict[int, tuple[frozenset[str], str]]] = {}
"""Per Lease, the guests' handler names and incarnations, by id of the guest."""


def _forget_after_fork() -> None:
    global _shared
    _shared = threading.Lock()
    _hosts.clear()
    _guests.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def member_selector(group: str) -> str:
    """The label selector of a group's member Leases."""
    return f"{LABEL_GROUP}={group},{LABEL_ROLE}={ROLE_MEMBER}"


def member_annotations(
    *, handlers: Sequence[str], guarded: Sequence[str], incarnation: str
) -> dict[str, str | None]:
    """The handler names, those of them only its guests (job guards, which run a job only
    when their own scheduler fires it) advertise, and the writing process's incarnation (None:
    the annotation removed)."""
    return {
        ANNOTATION_HANDLERS: json.dumps(sorted(handlers), separators=(",", ":")),
        ANNOTATION_GUARD_HANDLERS: (
            json.dumps(sorted(guarded), separators=(",", ":")) if guarded else None
        ),
        ANNOTATION_INCARNATION: incarnation or None,
    }


def advertised_handlers(obj: object, *, annotation: str = ANNOTATION_HANDLERS) -> frozenset[str]:
    """The handler names a raw member Lease advertises (with `ANNOTATION_GUARD_HANDLERS`:
    those only its job guards run); empty when absent or unreadable."""
    raw = lease_annotations(obj).get(annotation)
    return _handler_names(raw) if isinstance(raw, str) else frozenset()


@functools.lru_cache(maxsize=256)
def _handler_names(raw: str) -> frozenset[str]:
    """The names in one raw handlers annotation. Remembered: every claim of a large instant
    asks for the members' handlers, and a member's list of thousands of names costs a
    millisecond to parse (the same string object hashes once)."""
    try:
        names = json.loads(raw)
    except ValueError:
        return frozenset()
    if not isinstance(names, list):
        return frozenset()
    return frozenset(name for name in names if isinstance(name, str))


def incarnation_of(obj: dict[str, Any] | None) -> str:
    """The incarnation annotation of a member Lease ("" when there is none)."""
    value = lease_annotations(obj).get(ANNOTATION_INCARNATION)
    return value if isinstance(value, str) else ""


def live_members(
    objects: Iterable[dict[str, Any]],
    *,
    observed_at: Callable[[str | None, str], float | None],
    now: float,
    identity: str,
    fallback_s: float,
    parse: Callable[[dict[str, Any]], LeaseRecord] = parse_lease,
) -> list[str]:
    """The holders of the member Leases in `objects` that are live at local monotonic `now`
    (changed less than their leaseDurationSeconds ago, as `observed_at` says), plus
    `identity`, sorted. `parse` reads a raw Lease (`parse_lease`, or a cache of it)."""
    live = {identity}
    for obj in objects:
        record = parse(obj)
        seen_at = observed_at(record.namespace or None, record.name)
        if seen_at is None or not record.holder:
            continue
        seen = Observation(record=record, observed_at=seen_at)
        if grant_live(seen, now_mono=now, fallback_s=fallback_s):
            live.add(record.holder)
    return sorted(live)


class MemberLease:
    """This replica's member Lease: `write()` creates or renews it, `delete()` removes it."""

    def __init__(
        self,
        leases: LeaseStoreLike,
        *,
        namespace: str,
        group: str,
        identity: str,
        handlers: Callable[[], Sequence[str]],
        clock: Clock,
        duration_s: int,
        guest: bool = False,
    ) -> None:
        self.namespace = namespace
        self.group = group
        self.identity = identity
        self.name = member_lease_name(group, identity)
        self._lock = LeaseLock.open(
            leases,
            None,
            clock=clock,
            namespace=namespace,
            name=self.name,
            role=ROLE_MEMBER,
            labels={LABEL_GROUP: group},
        )
        self._handlers = handlers
        self._clock = clock
        self._duration_s = duration_s
        self._current: dict[str, Any] | None = None
        self.incarnation = secrets.token_hex(8)
        """Random per process: tells this process's writes from another's with its identity."""
        self.conflicts = 0
        """Renewals that found the Lease written by another live process with our identity."""
        self.guest = guest
        """Yields to a host of the same Lease in this process (see the module docstring)."""
        self.hosted = False
        """A guest whose handlers a host writes now."""
        self._key: _Key = (namespace, self.name)

    @property
    def written(self) -> bool:
        return self._current is not None

    def _record(self) -> LeaseRecord:
        now = self._clock.now()
        current = parse_lease(self._current) if self._current is not None else None
        return LeaseRecord(
            name=self.name,
            namespace=self.namespace,
            holder=self.identity,
            lease_duration_s=self._duration_s,
            acquire_time=current.acquire_time if current and current.acquire_time else now,
            renew_time=now,
            transitions=0,
            resource_version=current.resource_version if current else None,
        )

    def _hosted(self) -> bool:
        """A guest: note its handlers, and say whether another MemberLease of this process
        writes the Lease now (else this one does)."""
        with _shared:
            _guests.setdefault(self._key, {})[id(self)] = (
                frozenset(self._handlers()),
                self.incarnation,
            )
            host = _hosts.setdefault(self._key, self)
            self.hosted = host is not self
        if self.hosted:
            self._current = None  # the host holds the version; we start afresh after it
        return self.hosted

    def _all_handlers(self) -> tuple[list[str], list[str]]:
        """Every handler of the Lease, and those only guests advertise."""
        own = set(self._handlers())
        guests: set[str] = set()
        with _shared:
            for handlers, _ in _guests.get(self._key, {}).values():
                guests |= handlers
        only_guests = guests | own if self.guest else guests - own
        return sorted(own | guests), sorted(only_guests)

    def _wrote(self) -> None:
        """A Lease that is not a guest's keeps the name from a guest (not from another
        that is not a guest: two such are two processes to `_check_identity`)."""
        if self.guest:
            return
        with _shared:
            host = _hosts.get(self._key)
            if host is None or host.guest:
                _hosts[self._key] = self

    def _ours(self, incarnation: str) -> bool:
        """Whether `incarnation` is a write of a guest of this Lease in this process (or, for
        a guest, of its host): a shared Lease, not another process."""
        with _shared:
            guests = {inc for _, inc in _guests.get(self._key, {}).values()}
            host = _hosts.get(self._key)
        if incarnation in guests:
            return True
        return self.guest and host is not None and host.incarnation == incarnation

    async def write(self) -> None:
        """Create the Lease, or replace it at the version we wrote last; after a Conflict, a
        NotFound or a lost reply, start again from what the server has. A guest whose host
        keeps the Lease writes nothing."""
        for _ in range(_WRITES):
            if self.guest and self._hosted():
                return
            handlers, guarded = self._all_handlers()
            changes = member_annotations(
                handlers=handlers, guarded=guarded, incarnation=self.incarnation
            )
            renewing = self._current is not None
            try:
                if renewing:
                    base = self._lock.observe()
                    self._current = await self._lock.update(
                        self._record(), base=base, annotations=changes
                    )
                else:
                    self._current = await self._lock.create(self._record(), annotations=changes)
                self._wrote()
                return
            except (Conflict, NotFound, AlreadyExists, OutcomeUnknown) as e:
                seen = await self._lock.get()
                self._current = seen.obj if seen is not None else None
                if renewing and isinstance(e, Conflict):
                    self._check_identity(self._current)
        raise Conflict(f"member Lease {self.name} kept changing under us", reason="Conflict")

    def _check_identity(self, current: dict[str, Any] | None) -> None:
        """Our renewal met a version we did not write: another process that runs with our
        identity wrote it (a process of ours that restarted stops writing once it is gone, so
        only a live one makes a renewal conflict). Every grant in this identity then looks
        like its own to both, so both may run one tick: say so, loudly."""
        other = incarnation_of(current)
        if not other or other == self.incarnation or self._ours(other):
            return
        self.conflicts += 1
        IDENTITY_CONFLICTS.labels(group=self.group).inc()
        if self.conflicts % _REPORT_EVERY != 1:
            return
        _log.error(
            "another live process uses this replica's identity; each process needs its own "
            "(leave identity unset for a unique one)",
            identity=self.identity,
            group=self.group,
            namespace=self.namespace,
            lease=self.name,
            times=self.conflicts,
        )

    def _leave(self) -> bool:
        """Stop sharing the Lease; whether to delete it: not while another MemberLease of
        this process shares it (a guest writes it from its next renewal on)."""
        with _shared:
            guests = _guests.get(self._key, {})
            guests.pop(id(self), None)
            if not guests:
                _guests.pop(self._key, None)
            if _hosts.get(self._key) is self:
                del _hosts[self._key]
            if self.guest:
                return not guests and self._key not in _hosts
            return not guests

    async def delete(self) -> None:
        """Remove the Lease (best effort: it expires anyway), unless another MemberLease of
        this process shares it."""
        if not self._leave():
            self._current = None
            return
        try:
            await self._lock.delete()
        except KubeError as e:
            _log.info("member Lease not deleted", lease=self.name, error=repr(e))
        self._current = None
