"""The loop-side half of an informer: the cache of one collection, its subscribers and the
callers waiting on it. Only the asyncio loop thread calls into it.

Owns applying an event or a fresh list (stamping each new resourceVersion with the clock's
`monotonic()`, the moment this process saw it) and waking subscribers and `wait_for` callers.
Does not talk to the server: `watches.Informer` feeds it.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leasecron._logs import get_logger
from leasecron.kube import _diffs
from leasecron.kube._diffs import Key, object_key, resource_version
from leasecron.models.clocks import Clock

_log = get_logger("leasecron.kube.watches")


async def wait_until(
    predicate: Callable[[], bool],
    waiters: Callable[[], list[asyncio.Future[None]]],
    *,
    timeout: float | None,  # noqa: ASYNC109
) -> bool:
    """Wait until `predicate()` holds, re-checked each time a future of the list `waiters()`
    returns (the one current then) is resolved; False when `timeout` seconds pass first."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while not predicate():
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return False
        waiter: asyncio.Future[None] = loop.create_future()
        pending = waiters()
        pending.append(waiter)
        try:
            await asyncio.wait([waiter], timeout=remaining)
        finally:
            if waiter in pending:
                pending.remove(waiter)
    return True


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by an Informer. `type` is ADDED, MODIFIED, DELETED, or SYNCED (the
    cache matches a fresh list; `obj` is then empty). `observed_at` is the loop clock's
    monotonic time when the event was applied."""

    type: str
    obj: dict[str, Any] = field(repr=False)
    observed_at: float


Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""What a cache keeps of each object it is given (client-go's informer transform)."""


_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def compact(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as a cache of objects read and never written back whole (PUT) keeps it: without
    the field managers' bookkeeping (metadata.managedFields) and kubectl's last-applied copy
    of the object, its spec shared with every equal one (`shared_json`). 10,000 ScheduledJobs
    with default specs: a replica's peak RSS 272 MB with managedFields, 210 MB without, 147 MB
    with the specs shared too (docs/benchmarks.md)."""
    kept = dict(obj)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        kept["metadata"] = metadata = {k: v for k, v in metadata.items() if k != "managedFields"}
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and _LAST_APPLIED in annotations:
            metadata["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    if isinstance(obj.get("spec"), dict):
        kept["spec"] = shared_json(obj["spec"])
    return kept


class SharedDict(dict[str, Any]):
    """A dict `shared_json` hands out: held by every equal value, so never changed in place."""

    __slots__ = ("__weakref__",)


class SharedList(list[Any]):
    """A list `shared_json` hands out: held by every equal value, so never changed in place."""

    __slots__ = ("__weakref__",)


_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], SharedDict | SharedList] = (
    weakref.WeakValueDictionary()
)


def shared_json(value: Any) -> Any:
    """`value` (decoded JSON) with each of its dicts and lists one that every equal value
    passed here shares while any holds it (hash-consing: 10,000 ScheduledJobs with equal
    specs hold one spec; with distinct ones, their equal parts). Looked up by a flat key of
    its items, where a dict or list in it stands as its shared instance's id: the table
    holds a value only weakly and the value holds its parts, so no id in a live key is
    reused."""
    if isinstance(value, dict):
        items = [(sys.intern(k), shared_json(v)) for k, v in value.items()]
        key: tuple[Any, ...] = (dict, *(part for k, v in items for part in (k, *_tagged(v))))
        made: SharedDict | SharedList = SharedDict(items)
    elif isinstance(value, list):
        elements = [shared_json(v) for v in value]
        key = (list, *(part for v in elements for part in _tagged(v)))
        made = SharedList(elements)
    else:
        return value
    found = _SHARED.get(key)
    if found is None:
        _SHARED[key] = found = made
    return found


def _tagged(value: Any) -> tuple[Any, Any]:
    """A value in a shared key: its type beside it (1, 1.0 and true are equal in Python, not
    in JSON), a shared dict or list by its id."""
    if isinstance(value, SharedDict | SharedList):
        return type(value), id(value)
    return type(value), value


class ObjectCache:
    """Objects by (namespace, name), when each current version was first seen, subscribers.
    With `transform`, what it keeps (and tells subscribers) of each object is the transform's."""

    def __init__(self, *, path: str, clock: Clock, transform: Transform | None = None) -> None:
        self.path = path
        self._clock = clock
        self._transform = transform
        self._objects: dict[Key, dict[str, Any]] = {}
        self._observed: dict[Key, float] = {}
        self._subscribers: list[Callable[[WatchEvent], None]] = []
        self._waiters: list[asyncio.Future[None]] = []

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._objects.get((namespace, name))

    def observed_at(self, namespace: str | None, name: str) -> float | None:
        """Monotonic time this process first saw the object's current resourceVersion."""
        return self._observed.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
        return list(self._objects.values())

    def subscribe(self, callback: Callable[[WatchEvent], None]) -> Callable[[], None]:
        """Call `callback` in the loop thread for every event; returns the unsubscribe.
        An exception in a callback is logged and does not stop the informer."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    async def wait_for(self, predicate: Callable[[], bool], *, timeout: float | None) -> bool:  # noqa: ASYNC109
        """Wait until `predicate()` is true, re-checking after every event and health change;
        False when `timeout` seconds pass first."""
        return await wait_until(predicate, lambda: self._waiters, timeout=timeout)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if self._transform is not None:
            obj = self._transform(obj)
        key = object_key(obj)
        now = self._clock.monotonic()
        if kind == _diffs.DELETED:
            if self._objects.pop(key, None) is None:
                return
            self._observed.pop(key, None)
        else:
            previous = self._objects.get(key)
            if previous is not None and resource_version(previous) == resource_version(obj):
                return
            self._objects[key] = obj
            self._observed[key] = now
        self._emit(WatchEvent(type=kind, obj=obj, observed_at=now))

    def _apply_list(self, items: list[dict[str, Any]]) -> None:
        for kind, obj in _diffs.relist_events(self._objects, items):
            self._apply(kind, obj)
        self._emit(WatchEvent(type=_diffs.SYNCED, obj={}, observed_at=self._clock.monotonic()))

    def _emit(self, event: WatchEvent) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:
                _log.exception("informer subscriber failed", path=self.path, kind=event.type)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
