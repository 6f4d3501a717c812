"""The handler registry: handler names (what `spec.handler` refers to) mapped to callables.

Owns registration rules (a name is registered once, a handler takes one argument, the
JobContext) and whether a handler is a coroutine function (run as a task) or a plain callable
(run in a thread pool). It does not run anything and does not know about ScheduledJobs.
Listeners are told about every registration, so a running scheduler can advertise the new
name on its member Lease.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[[Any], Any]
"""A handler: `def fn(ctx: JobContext) -> None` or `async def fn(ctx: JobContext) -> None`."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")


def is_async_handler(fn: Handler) -> bool:
    """True for coroutine functions, partials of them and objects with an async __call__."""
    target: object = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - async __call__ on an instance
    return call is not None and inspect.iscoroutinefunction(call)


@dataclass(frozen=True)
class RegisteredHandler:
    """One registered handler: its name, the callable and how it is run."""

    name: str
    fn: Handler
    is_async: bool


class HandlerRegistry:
    """Handler names to callables. Safe to use from any thread."""

    def __init__(self) -> None:
        self._handlers: dict[str, RegisteredHandler] = {}
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._names: tuple[tuple[str, ...], frozenset[str]] | None = None
        """The names sorted and as a set, made when first asked for after a registration."""

    def register(self, name: str, fn: Handler) -> RegisteredHandler:
        """Register `fn` under `name`; ValueError for a bad or taken name, TypeError when `fn`
        is not callable."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"handler name {name!r} must be 1-253 letters, digits, '.', '_', ':' or '-', "
                "starting with a letter or digit"
            )
        if not callable(fn):
            raise TypeError(f"handler {name!r} must be callable, got {type(fn).__name__}")
        entry = RegisteredHandler(name=name, fn=fn, is_async=is_async_handler(fn))
        with self._lock:
            if name in self._handlers:
                raise ValueError(f"handler name {name!r} is already registered")
            self._handlers[name] = entry
            self._names = None
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        return entry

    def get(self, name: str) -> RegisteredHandler | None:
        with self._lock:
            return self._handlers.get(name)

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted (as advertised on the member Lease)."""
        return self._kept()[0]

    def name_set(self) -> frozenset[str]:
        """Registered names, as a set (kept, not built per call: every claim asks for it)."""
        return self._kept()[1]

    def _kept(self) -> tuple[tuple[str, ...], frozenset[str]]:
        with self._lock:
            if self._names is None:
                names = tuple(sorted(self._handlers))
                self._names = (names, frozenset(names))
            return self._names

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._handlers

    def __len__(self) -> int:
        with self._lock:
            return len(self._handlers)

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` (in the registering thread) after each registration; returns the
        function that removes it."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove
