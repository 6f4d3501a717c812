"""The sync front end: one asyncio loop in a background thread, and thin wrappers that let
threaded applications use the one async implementation of locks and elections.

Owns `BackgroundLoop` (start a loop thread, run or submit coroutines to it, stop it) and
`SyncTickLock` / `SyncGrant` / `SyncElector`, which forward each call to the async object
on that loop and nothing more: there is no second implementation of any decision here.

It does not make the async objects thread-safe: every call goes through the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

from leasecron.coordination.elections import Elector
from leasecron.coordination.grants import (
    Grant,
    KeepAlive,
    Listener,
    LostEvent,
    ReleaseResult,
    Term,
)
from leasecron.coordination.locks import Skipped, TickLock

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self, *, name: str = "leasecron-loop") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the background loop is not running; call start()")
        return self._loop

    def start(self) -> BackgroundLoop:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait()
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; a concurrent Future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run `coro` on the loop and block this thread for its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("BackgroundLoop.run() called from its own loop thread")
        return self.submit(coro).result(timeout)

    def stop(self, *, timeout: float = 10.0) -> None:
        """Cancel what is still running, stop the loop and join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self.run(cancel_all(), timeout=timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._loop = self._thread = None
        self._ready.clear()

    def __enter__(self) -> BackgroundLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SyncGrant:
    """A Grant for threaded code: the same token, tick and `lost` event; blocking calls."""

    def __init__(self, grant: Grant, loop: BackgroundLoop) -> None:
        self.grant = grant
        self._loop = loop

    @property
    def token(self) -> int:
        return self.grant.token

    @property
    def tick(self) -> datetime:
        return self.grant.tick

    @property
    def lost(self) -> LostEvent:
        return self.grant.lost

    def assert_held(self) -> None:
        self.grant.assert_held()

    def renew(self) -> bool:
        return self._loop.run(self.grant.renew())

    def release(self) -> ReleaseResult:
        return self._loop.run(self.grant.release())

    @contextlib.contextmanager
    def kept_alive(self, *, listeners: tuple[Listener, ...] = ()) -> Iterator[SyncGrant]:
        """Keep the grant alive in the loop thread while the block runs, then release it."""

        async def start() -> KeepAlive:
            keep_alive = self.grant.keep_alive(listeners=listeners)
            keep_alive.start()
            return keep_alive

        keep_alive = self._loop.run(start())
        try:
            yield self
        finally:
            self._loop.run(keep_alive.stop())
            self.release()


class SyncTickLock:
    """`TickLock.claim` for threaded code."""

    def __init__(self, lock: TickLock, loop: BackgroundLoop) -> None:
        self.lock = lock
        self._loop = loop

    def claim(
        self,
        tick: datetime,
        *,
        stagger: float = 0.0,
        starting_deadline: float | timedelta | None = None,
    ) -> SyncGrant | None:
        result = self.try_claim(tick, stagger=stagger, starting_deadline=starting_deadline)
        return result if isinstance(result, SyncGrant) else None

    def try_claim(
        self,
        tick: datetime,
        *,
        stagger: float = 0.0,
        starting_deadline: float | timedelta | None = None,
    ) -> SyncGrant | Skipped:
        coro = self.lock.try_claim(tick, stagger=stagger, starting_deadline=starting_deadline)
        result = self._loop.run(coro)
        return SyncGrant(result, self._loop) if isinstance(result, Grant) else result


class SyncElector:
    """`Elector` for threaded code: start() runs it on the loop; stop() ends and releases."""

    def __init__(self, elector: Elector, loop: BackgroundLoop) -> None:
        self.elector = elector
        self._loop = loop

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader

    @property
    def token(self) -> int | None:
        return self.elector.token

    def start(self) -> None:
        async def start() -> None:
            self.elector.start()

        self._loop.run(start())

    def stop(self, *, release: bool = True, timeout: float | None = None) -> None:
        self._loop.run(self.elector.stop(release=release), timeout=timeout)

    def wait_leading(self, timeout: float | None = None) -> Term | None:
        return self._loop.run(self.elector.wait_leading(timeout=timeout))

    @contextlib.contextmanager
    def leading(self) -> Iterator[Term]:
        """Block until leading; yield the term; stop and release on exit."""
        self.start()
        try:
            term = None
            while term is None:
                term = self.wait_leading()
            yield term
        finally:
            self.stop(release=True)
