"""Group membership: this replica's member Lease kept alive, and the live members of its group.

The Lease itself is written through coordination (`coordination.members.MemberLease`),
renewed every `renew_every` seconds with a `duration_s` lease and deleted on a clean stop. An
informer on the group's member Leases tells which members are live (`live_members`); the live
list feeds the rendezvous ranks; the operator reads the same Leases to show handler coverage.

What it does not promise: that two replicas see the same member list at every instant (ranks
may briefly disagree; the Lease protocol, not the ranks, is what keeps runs single).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence

from leasecron._logs import get_logger
from leasecron.coordination import LeaseRecords
from leasecron.coordination.members import (
    MemberLease,
    advertised_handlers,
    live_members,
    member_selector,
)
from leasecron.kube.errors import KubeError
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer
from leasecron.models.clocks import Clock
from leasecron.models.names import ANNOTATION_GUARD_HANDLERS

_log = get_logger("leasecron.runtime.membership")
_GUARDED_TTL = 0.5
"""Seconds the set of handlers that live members run in job guards is read again after."""
_RECORDS_LIMIT = 4096
"""Member Leases whose records `members()` keeps before it starts afresh."""


class Membership:
    """This replica's member Lease (kept alive) and the group's live members (watched)."""

    def __init__(
        self,
        *,
        leases: LeaseStore,
        namespace: str,
        group: str,
        identity: str,
        handlers: Callable[[], Sequence[str]],
        clock: Clock,
        duration_s: int = 15,
        renew_every: float = 5.0,
    ) -> None:
        self._lease = MemberLease(
            leases,
            namespace=namespace,
            group=group,
            identity=identity,
            handlers=handlers,
            clock=clock,
            duration_s=duration_s,
        )
        self.namespace = namespace
        self.group = group
        self.identity = identity
        self.name = self._lease.name
        self._clock = clock
        self._duration_s = duration_s
        self._renew_every = renew_every
        self._informer = Informer(
            leases.kube,
            path=leases.collection_path(namespace=namespace),
            label_selector=member_selector(group),
            clock=clock,
        )
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._guarded: frozenset[str] = frozenset()
        self._guarded_at: float | None = None
        self._records = LeaseRecords(limit=_RECORDS_LIMIT)
        """The member Leases' records: `members()` is asked on every claim of an instant."""

    @property
    def informer(self) -> Informer:
        return self._informer

    async def start(self) -> None:
        """Write the member Lease and sync the member cache; raises KubeError when the API
        server cannot be reached (nothing is left running then)."""
        await self._lease.write()
        try:
            await self._informer.start()
        except BaseException:
            await self._lease.delete()
            raise
        self._task = asyncio.get_running_loop().create_task(
            self._keep_alive(), name=f"leasecron member {self.name}"
        )

    async def stop(self) -> None:
        """Stop renewing and delete the member Lease (best effort), then stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._lease.written:
            await self._lease.delete()
        await self._informer.stop()

    def advertise(self) -> None:
        """Rewrite the member Lease soon (the handler list changed). Loop thread only."""
        self._wake.set()

    def members(self) -> list[str]:
        """Identities of the live members, this replica always included, sorted."""
        return live_members(
            self._informer.items(),
            observed_at=self._informer.observed_at,
            now=self._clock.monotonic(),
            identity=self.identity,
            fallback_s=self._duration_s,
            parse=self._records,
        )

    def members_with(self, handlers: Iterable[str], *, own: Iterable[str]) -> list[str]:
        """The live members (as `members()`) that registered every handler in `handlers`;
        this replica's own registrations are `own` (its Lease may lag them)."""
        needed = frozenset(handlers)
        live = set(self.members())
        able = {self.identity} if needed <= frozenset(own) else set()
        for obj in self._informer.items():
            holder = str((obj.get("spec") or {}).get("holderIdentity") or "")
            if holder == self.identity:
                continue  # our own registrations are `own`
            if holder in live and needed <= advertised_handlers(obj):
                able.add(holder)
        return sorted(able)

    def guarded(self, handler: str) -> bool:
        """Whether a live member runs `handler` in a job guard (a guard fires it from
        another scheduler, claiming on its own Lease). Read from the watched member Leases,
        at most every `_GUARDED_TTL` seconds."""
        now = self._clock.monotonic()
        if self._guarded_at is None or now - self._guarded_at >= _GUARDED_TTL:
            live = set(self.members())
            found: set[str] = set()
            for obj in self._informer.items():
                holder = str((obj.get("spec") or {}).get("holderIdentity") or "")
                if holder in live:
                    found |= advertised_handlers(obj, annotation=ANNOTATION_GUARD_HANDLERS)
            self._guarded, self._guarded_at = frozenset(found), now
        return handler in self._guarded

    async def _keep_alive(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._renew_every)
            self._wake.clear()
            try:
                await self._lease.write()
            except KubeError as e:
                _log.warning("member Lease renewal failed", lease=self.name, error=repr(e))
