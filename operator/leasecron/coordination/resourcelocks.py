"""`LeaseLock`: get, create and update of one Lease, and nothing else (client-go's
resourcelock.LeaseLock). No timing and no decisions: those live in the loops that use it.

Owns the labels and owner reference leasecron puts on its Leases, the conversion from a
`LeaseRecord` to the object written (`models.leases.lease_body`, preserving everything on the
Lease that is not ours), and feeding every response back into the process's `LeaseView`, so
that the next decision starts from what the server said. Every update is conditional on the
resourceVersion the decision was based on. It does not retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Protocol, Required, TypedDict, Unpack

from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError
from leasecron.kube.leases import LeaseStore
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.decisions import Observation
from leasecron.models.groups import ROLE_GROUP
from leasecron.models.leases import LeaseRecord, lease_body, with_annotations
from leasecron.models.names import LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY
from leasecron.models.vocabulary import LEGACY_GUARD, LEGACY_JOB, Role

ROLE_LEADER = Role.LEADER
ROLE_SHARD = Role.SHARD
LEASE_SELECTOR = (
    f"{LABEL_ROLE} in ({ROLE_LEADER},{ROLE_SHARD},{LEGACY_GUARD},{ROLE_GROUP},{LEGACY_JOB})"
)
"""The label selector of the Leases a process watches for its locks and electors: every role
but members and floors (with the elections and guard locks earlier versions labelled `job`
and `guard`)."""


class LeaseStoreLike(Protocol):
    """The part of `kube.leases.LeaseStore` a lock uses (tests pass an in-memory one).
    `timeout` bounds one request in the sending thread: a write that times out raises
    OutcomeUnknown (it may have landed), never a silent abandon."""

    async def get(
        self,
        *,
        namespace: str,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any] | None: ...

    async def create(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]: ...

    async def replace(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]: ...

    async def delete(self, *, namespace: str, name: str) -> None: ...


def lease_store(kube: Kube | LeaseStoreLike) -> LeaseStoreLike:
    """A LeaseStore over `kube`, or `kube` itself when it already is a store."""
    return LeaseStore(kube) if isinstance(kube, Kube) else kube


def default_labels(role: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """leasecron's labels for a Lease of `role`, with `extra` merged over them."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ROLE: role}
    labels.update(extra or {})
    return labels


class LeaseLock:
    """One Lease: read it from the view (free) or the server (a GET), create it, update it."""

    def __init__(
        self,
        store: LeaseStoreLike,
        view: LeaseView,
        *,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        owner_reference: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.view = view
        self.namespace = namespace
        self.name = name
        self.labels = dict(labels)
        self.owner_reference = dict(owner_reference) if owner_reference else None

    @classmethod
    def open(
        cls,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        *,
        clock: Clock,
        namespace: str,
        name: str,
        role: str,
        labels: Mapping[str, str] | None = None,
        owner_reference: Mapping[str, Any] | None = None,
    ) -> LeaseLock:
        """The lock of one Lease of `role`, reading through the process's shared view of
        `cache` (a view of its own, fed only by its own requests, when there is no cache)."""
        return cls(
            lease_store(kube),
            LeaseView.shared(cache, clock=clock),
            namespace=namespace,
            name=name,
            labels=default_labels(role, labels),
            owner_reference=owner_reference,
        )

    def __repr__(self) -> str:
        return f"LeaseLock({self.namespace}/{self.name})"

    def observe(self) -> Seen | None:
        """What this process knows of the Lease, without a request."""
        return self.view.seen(self.namespace, self.name)

    async def refresh(self, *, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """GET the Lease into the view (after a conflict, or to read back a write whose reply
        was lost); False when the store could not be read."""
        try:
            await self.get(timeout=timeout)
        except (KubeError, TimeoutError):
            return False
        return True

    async def get(self, *, timeout: float | None = None) -> Seen | None:  # noqa: ASYNC109
        """GET the Lease (after a conflict, or when the cache does not select it)."""
        obj = await self.store.get(namespace=self.namespace, name=self.name, timeout=timeout)
        if obj is None:
            self.view.forget(self.namespace, self.name)
        else:
            self.view.note(obj)
        return self.observe()

    def body(self, record: LeaseRecord, *, base: Seen | None) -> dict[str, Any]:
        return lease_body(
            record,
            base=base.obj if base is not None else None,
            labels=self.labels,
            owner_reference=self.owner_reference,
        )

    async def create(
        self,
        record: LeaseRecord,
        *,
        annotations: Mapping[str, str | None] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """Create the Lease holding `record` (and `annotations`); AlreadyExists when someone
        was first."""
        body = with_annotations(self.body(record, base=None), annotations or {})
        body["metadata"].pop("resourceVersion", None)
        obj = await self.store.create(namespace=self.namespace, body=body, timeout=timeout)
        self.view.note(obj)
        return obj

    async def update(
        self,
        record: LeaseRecord,
        *,
        base: Seen | None,
        annotations: Mapping[str, str | None] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """PUT `record` (and `annotations`; None: removed) conditionally on its
        resourceVersion; Conflict when it is stale."""
        body = with_annotations(self.body(record, base=base), annotations or {})
        obj = await self.store.replace(namespace=self.namespace, body=body, timeout=timeout)
        self.view.note(obj)
        return obj

    async def annotate(
        self,
        changes: Mapping[str, str | None],
        *,
        base: Seen,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        """PUT `base` with its annotations changed (None: removed) and nothing else, holder
        and spec as they were; conditional on base's resourceVersion (Conflict when stale)."""
        body = with_annotations(base.obj, changes)
        obj = await self.store.replace(namespace=self.namespace, body=body, timeout=timeout)
        self.view.note(obj)
        return obj

    async def delete(self) -> None:
        """Delete the Lease (one already gone is not an error) and forget it."""
        await self.store.delete(namespace=self.namespace, name=self.name)
        self.view.forget(self.namespace, self.name)


TokenFloor = Callable[[], Awaitable[int]]
"""Reads the highest fencing token on record for a Lease's job (before creating the Lease)."""


class PartyOptions(TypedDict, total=False):
    """Who acts on which Lease: the keyword arguments TickLock and Elector share."""

    namespace: Required[str]
    name: Required[str]
    identity: Required[str]
    clock: Clock
    labels: Mapping[str, str] | None
    owner_reference: Mapping[str, Any] | None
    floor: TokenFloor | None
    """Reads the job's token floor before the Lease is created (None: no floor)."""


class Situation(TypedDict):
    """What a pure decision needs to know of one party on one Lease, now."""

    current: Observation | None
    identity: str
    now_mono: float
    now_wall: datetime
    name: str
    namespace: str


class LeaseParty:
    """One replica (`identity`) acting on one Lease through the process's shared view: what
    TickLock and Elector have in common (the Lease, the clock, the token floor)."""

    role = ROLE_LEADER

    def __init__(
        self,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        **options: Unpack[PartyOptions],
    ) -> None:
        self.namespace = options["namespace"]
        self.name = options["name"]
        self.identity = options["identity"]
        self._clock = options.get("clock", SYSTEM_CLOCK)
        self._floor = options.get("floor")
        self.lease = LeaseLock.open(
            kube,
            cache,
            clock=self._clock,
            namespace=self.namespace,
            name=self.name,
            role=self.role,
            labels=options.get("labels"),
            owner_reference=options.get("owner_reference"),
        )

    @property
    def clock(self) -> Clock:
        """The clock this party reads."""
        return self._clock

    def _situation(self, seen: Seen | None) -> Situation:
        """The keyword arguments every `models.decisions` decision of this party shares."""
        return Situation(
            current=seen.observation if seen is not None else None,
            identity=self.identity,
            now_mono=self._clock.monotonic(),
            now_wall=self._clock.now(),
            name=self.name,
            namespace=self.namespace,
        )

    async def _token_floor(self, seen: Seen | None) -> int:
        """The job's token floor when the Lease is to be created (it is unknown); 0 else.
        Raises KubeError when the floor cannot be read."""
        if seen is not None or self._floor is None:
            return 0
        return await self._floor()
