"""Group membership: this replica's member Lease, and the live members of its group.

Each replica keeps one Lease named `member_lease_name(group, identity)`, labelled with its
group and `role=member`, holding itself, annotated with the JSON list of its handler names,
renewed every `renew_every` seconds with a `duration_s` lease, and deleted on a clean stop.
An informer on the group's member Leases tells which members are live: a member is live while
its Lease changed less than its leaseDurationSeconds ago by this replica's monotonic clock
(the same rule as any grant, DESIGN §5). The live list feeds the rendezvous ranks; the
operator reads the same Leases to show handler coverage.

What it does not promise: that two replicas see the same member list at every instant (ranks
may briefly disagree; the Lease protocol, not the ranks, is what keeps runs single).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from leasecron._logs import get_logger
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer
from leasecron.models.clocks import Clock
from leasecron.models.decisions import Observation, grant_live
from leasecron.models.leases import LeaseRecord, lease_body, parse_lease
from leasecron.models.names import (
    ANNOTATION_HANDLERS,
    LABEL_GROUP,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    member_lease_name,
)

_log = get_logger("leasecron.runtime.membership")
ROLE_MEMBER = "member"


def member_selector(group: str) -> str:
    """The label selector of a group's member Leases."""
    return f"{LABEL_GROUP}={group},{LABEL_ROLE}={ROLE_MEMBER}"


def member_body(
    *,
    record: LeaseRecord,
    group: str,
    handlers: Sequence[str],
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The member Lease for `record`, labelled and annotated with the handler names."""
    labels = {LABEL_GROUP: group, LABEL_ROLE: ROLE_MEMBER, LABEL_MANAGED_BY: MANAGED_BY}
    body = lease_body(record, base=base, labels=labels)
    annotations = body["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION_HANDLERS] = json.dumps(sorted(handlers), separators=(",", ":"))
    return body


def live_members(
    objects: Iterable[dict[str, Any]],
    *,
    observed_at: Callable[[str | None, str], float | None],
    now: float,
    identity: str,
    fallback_s: float,
) -> list[str]:
    """The holders of the member Leases in `objects` that are live at local monotonic `now`
    (changed less than their leaseDurationSeconds ago, as `observed_at` says), plus
    `identity`, sorted."""
    live = {identity}
    for obj in objects:
        record = parse_lease(obj)
        seen_at = observed_at(record.namespace or None, record.name)
        if seen_at is None or not record.holder:
            continue
        seen = Observation(record=record, observed_at=seen_at)
        if grant_live(seen, now_mono=now, fallback_s=fallback_s):
            live.add(record.holder)
    return sorted(live)


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
        self._leases = leases
        self.namespace = namespace
        self.group = group
        self.identity = identity
        self.name = member_lease_name(group, identity)
        self._handlers = handlers
        self._clock = clock
        self._duration_s = duration_s
        self._renew_every = renew_every
        self._informer = Informer(
            leases.kube,
            path=leases.collection_path(namespace=namespace),
            label_selector=member_selector(group),
            clock=clock,
        )
        self._current: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def informer(self) -> Informer:
        return self._informer

    async def start(self) -> None:
        """Write the member Lease and sync the member cache; raises KubeError when the API
        server cannot be reached (nothing is left running then)."""
        await self._write()
        try:
            await self._informer.start()
        except BaseException:
            await self._delete()
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
        if self._current is not None:
            await self._delete()
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
        )

    async def _keep_alive(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._renew_every)
            self._wake.clear()
            try:
                await self._write()
            except KubeError as e:
                _log.warning("member Lease renewal failed", lease=self.name, error=repr(e))

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

    async def _write(self) -> None:
        """Create the Lease, or replace it at the version we wrote last; after a Conflict or
        NotFound, start again from what the server has."""
        for _ in range(3):
            body = member_body(
                record=self._record(),
                group=self.group,
                handlers=self._handlers(),
                base=self._current,
            )
            try:
                if self._current is None:
                    self._current = await self._leases.create(namespace=self.namespace, body=body)
                else:
                    self._current = await self._leases.replace(namespace=self.namespace, body=body)
                return
            except (Conflict, NotFound, AlreadyExists):
                self._current = await self._leases.get(namespace=self.namespace, name=self.name)
        raise Conflict(f"member Lease {self.name} kept changing under us", reason="Conflict")

    async def _delete(self) -> None:
        try:
            await self._leases.delete(namespace=self.namespace, name=self.name)
        except KubeError as e:
            _log.info("member Lease not deleted", lease=self.name, error=repr(e))
        self._current = None
