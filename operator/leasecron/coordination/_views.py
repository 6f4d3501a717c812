"""`LeaseView`: what this process currently believes about each Lease, and since when.

It merges two sources: the watch-fed cache (an `Informer` on the namespace's Leases, shared by
every lock and elector of the process) and the responses to this process's own requests
(which arrive before the watch echoes them, or for Leases the cache does not select). For each
Lease it keeps the newest version and the local monotonic time it was first seen: what expiry
is measured from (docs/design.md §5). It wakes waiters per Lease on any change, so a standby sleeps
until the Lease changes or its grant expires instead of polling, and it logs a corrupt record
once per resourceVersion. A Lease is parsed once per resourceVersion (the last one is kept).

It does not send requests and does not decide anything; the view may lag the store, which is
why every write built from it is conditional.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from leasecron._logs import get_logger
from leasecron.kube.watches import WatchEvent, wait_until
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.decisions import Observation
from leasecron.models.leases import LeaseRecord, parse_lease

_log = get_logger("leasecron.coordination")
Key = tuple[str, str]


class LeaseCache(Protocol):
    """The part of `kube.watches.Informer` a view needs."""

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    def observed_at(self, namespace: str | None, name: str) -> float | None: ...

    def subscribe(self, callback: Callable[[WatchEvent], None]) -> Callable[[], None]: ...


@dataclass(frozen=True)
class Seen:
    """The raw Lease (base for the next write) and its parsed observation."""

    obj: dict[str, Any] = field(repr=False)
    observation: Observation

    @property
    def resource_version(self) -> str | None:
        return self.observation.record.resource_version


def _rv(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""


def _newer(candidate: str, current: str) -> bool:
    """Whether resourceVersion `candidate` is newer than `current`. They are opaque strings,
    but etcd-backed servers issue increasing integers; anything else counts as newer."""
    if candidate.isdigit() and current.isdigit():
        return int(candidate) > int(current)
    return candidate != current


def _key_of(obj: dict[str, Any]) -> Key | None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


class LeaseRecords:
    """`parse_lease` of raw Leases, each parsed once per resourceVersion (a version never
    changes): one Lease's record is asked for on every claim, renewal and ranking. Holds the
    newest version of each Lease; with `limit`, starts afresh past that many Leases (a
    watcher that is not told of deletions). Loop thread only."""

    def __init__(self, *, limit: int | None = None) -> None:
        self._parsed: dict[Key, tuple[str, LeaseRecord]] = {}
        self._limit = limit

    def __call__(self, obj: dict[str, Any]) -> LeaseRecord:
        key, version = _key_of(obj), _rv(obj)
        if key is None or not version:
            return parse_lease(obj)
        parsed = self._parsed.get(key)
        if parsed is not None and parsed[0] == version:
            return parsed[1]
        if self._limit is not None and len(self._parsed) >= self._limit:
            self._parsed.clear()
        record = parse_lease(obj)
        self._parsed[key] = (version, record)
        return record

    def forget(self, key: Key) -> None:
        self._parsed.pop(key, None)


_SHARED_ATTRIBUTE = "_leasecron_lease_view"


class LeaseView:
    """Newest known version of each Lease, with the local time it was first seen."""

    def __init__(self, cache: LeaseCache | None, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._cache = cache
        self._clock = clock
        self._local: dict[Key, tuple[dict[str, Any], float]] = {}
        self._waiters: dict[Key, list[asyncio.Future[None]]] = {}
        self._watchers: dict[Key, list[Callable[[dict[str, Any] | None], None]]] = {}
        self._reported: dict[Key, str] = {}
        self._mine: dict[tuple[str, str, str], dict[int, float]] = {}
        self._records = LeaseRecords()
        self._unsubscribe = cache.subscribe(self._on_event) if cache is not None else None

    @classmethod
    def shared(
        cls, cache: LeaseCache | LeaseView | None, *, clock: Clock = SYSTEM_CLOCK
    ) -> LeaseView:
        """The one view of `cache` for this process (created on first use); a view of its
        own, fed only by its own requests, when there is no cache."""
        if isinstance(cache, LeaseView):
            return cache
        if cache is None:
            return cls(None, clock=clock)
        view = getattr(cache, _SHARED_ATTRIBUTE, None)
        if not isinstance(view, LeaseView):
            view = cls(cache, clock=clock)
            # Kept on the cache itself, so the two live and die together.
            setattr(cache, _SHARED_ATTRIBUTE, view)
        return view

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # --- reading ---------------------------------------------------------------------------

    def seen(self, namespace: str, name: str) -> Seen | None:
        """The newest version this process knows of, or None when it knows of none."""
        key = (namespace, name)
        cache = self._cache
        cached = cache.get(namespace, name) if cache is not None else None
        local = self._local.get(key)
        if local is not None and cached is not None and not _newer(_rv(local[0]), _rv(cached)):
            del self._local[key]  # the watch caught up with our own response
            local = None
        if local is not None:
            obj, first_seen = local
        elif cached is not None and cache is not None:
            obj = cached
            first_seen = cache.observed_at(namespace, name) or self._clock.monotonic()
        else:
            return None
        record = self._records(obj)
        if record.problems and self._reported.get(key) != record.resource_version:
            self._reported[key] = record.resource_version or ""
            _log.warning(
                "lease record is corrupt; deciding conservatively",
                lease=name,
                namespace=namespace,
                resource_version=record.resource_version,
                holder=record.holder,
                problems="; ".join(record.problems),
            )
        return Seen(obj, Observation(record=record, observed_at=first_seen))

    def mine(self, namespace: str, name: str, identity: str) -> dict[int, float]:
        """The grants this process holds on purpose on one Lease in `identity` (being claimed,
        running, or held for atLeastFor), token -> until when (local monotonic; inf while
        claimed or running): one registry shared by every lock of the process, so that no
        lock takes another's grant for an orphan. Loop thread only."""
        return self._mine.setdefault((namespace, name, identity), {})

    def record_of(self, obj: dict[str, Any]) -> LeaseRecord:
        """`parse_lease(obj)` of a Lease this view was told of (a watcher's `obj`), from the
        same once-per-resourceVersion cache `seen()` reads."""
        return self._records(obj)

    # --- learning from our own requests -------------------------------------------------------

    def note(self, obj: dict[str, Any]) -> None:
        """Record a Lease returned by our own request (write response or GET)."""
        key = _key_of(obj)
        if key is None:
            return
        current = self.seen(*key)
        if current is not None and current.resource_version == (_rv(obj) or None):
            return
        if current is not None and not _newer(_rv(obj), current.resource_version or ""):
            return
        self._local[key] = (obj, self._clock.monotonic())
        self._changed(key, obj)

    def forget(self, namespace: str, name: str) -> None:
        """Our request found the Lease gone (NotFound): drop what we noted of it."""
        key = (namespace, name)
        if self._local.pop(key, None) is not None:
            self._changed(key, None)

    # --- waiting and watching -----------------------------------------------------------------

    def watch(
        self, namespace: str, name: str, callback: Callable[[dict[str, Any] | None], None]
    ) -> Callable[[], None]:
        """Call `callback(obj or None)` on every change of one Lease; returns the unwatch."""
        callbacks = self._watchers.setdefault((namespace, name), [])
        callbacks.append(callback)

        def unwatch() -> None:
            if callback in callbacks:
                callbacks.remove(callback)

        return unwatch

    def kick(self, namespace: str, name: str) -> None:
        """Wake the waiters of one Lease (for instance to notice a stop request)."""
        for waiter in self._waiters.pop((namespace, name), []):
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for(
        self,
        namespace: str,
        name: str,
        predicate: Callable[[], bool],
        *,
        timeout: float | None,  # noqa: ASYNC109
    ) -> bool:
        """Wait until `predicate()` holds, re-checked on every change of this Lease (and each
        kick); False when `timeout` seconds pass first."""
        key = (namespace, name)
        return await wait_until(
            predicate, lambda: self._waiters.setdefault(key, []), timeout=timeout
        )

    def _on_event(self, event: WatchEvent) -> None:
        key = _key_of(event.obj)
        if key is None or not key[1]:
            return
        if event.type == "DELETED":
            self._local.pop(key, None)
            self._records.forget(key)
            self._reported.pop(key, None)
            self._changed(key, None)
            return
        local = self._local.get(key)
        if local is not None and not _newer(_rv(event.obj), _rv(local[0])):
            # The watch is still catching up with what our own request returned: an older
            # version must not look like a change (a grant of ours "lost", then an orphan).
            return
        self._changed(key, event.obj)

    def _changed(self, key: Key, obj: dict[str, Any] | None) -> None:
        for callback in list(self._watchers.get(key, ())):
            try:
                callback(obj)
            except Exception:
                _log.exception("lease watcher failed", lease=key[1], namespace=key[0])
        self.kick(*key)
