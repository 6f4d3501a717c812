"""Grants and fencing: what a successful claim hands to the code that runs the job.

Owns `Grant` and `Term` (fencing token, tick, holder, a `lost` event, `assert_held()`, `renew()`,
`release()`), `LostLockError`, `LostEvent` (a `threading.Event` that also wakes asyncio
waiters and listeners, so it can be set and read from sync or async code), and `KeepAlive`,
which wraps a grant: it renews every atMostFor / 3 and, when a renewal is refused or the grant
would expire, sets `lost` and notifies its listeners (whose exceptions are logged and never
reach the job).

What it does not promise (DESIGN §7): `assert_held()` is only as fresh as this process's view;
a process paused past its grant can still write after losing it. The token is what lets a
store reject such a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from leasecron._logs import get_logger
from leasecron.models.clocks import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from leasecron.coordination.locks import TickLock

_log = get_logger("leasecron.coordination")

Listener = Callable[["Grant", str], Awaitable[object] | object]
"""Called with the grant and the reason when it is lost; may be sync or async."""


class LostLockError(RuntimeError):
    """The grant is gone: lost to another holder, expired by local time, or released."""


class LostEvent(threading.Event):
    """A threading.Event whose `set()` also runs registered callbacks once (from the setting
    thread). `wait_async()` awaits it from a coroutine without blocking the loop."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def set(self) -> None:
        with self._guard:
            if self.is_set():
                return
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _log.exception("lost callback failed")

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when the event is set (at once if it already is); returns a
        function that unregisters it."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._guard, contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    async def wait_async(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Await the event; False when `timeout` seconds pass first."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # loop closed meanwhile
                loop.call_soon_threadsafe(resolve)

        remove = self.on_set(wake)
        try:
            await asyncio.wait([future], timeout=timeout)
        finally:
            remove()
        return future.done() or self.is_set()


async def call_listener(callback: Callable[..., Any], *args: Any, what: str, **log: Any) -> None:
    """Call a user callback (sync or async); its exception is logged, never raised."""
    try:
        result = callback(*args)
        if inspect.isawaitable(result):
            await result
    except asyncio.CancelledError:
        raise
    except Exception:
        _log.exception(f"{what} failed", **log)


@dataclass(frozen=True, eq=False)
class Term:
    """One ownership term: the fencing token is the Lease's leaseTransitions for it."""

    token: int
    identity: str
    started_at: float
    lost: LostEvent = field(default_factory=LostEvent)

    def assert_held(self) -> None:
        """Raise LostLockError once the term has ended."""
        if self.lost.is_set():
            raise LostLockError(f"term {self.token} of {self.identity} has ended")


class Grant:
    """One successful claim of one tick: the fencing token is the Lease's leaseTransitions
    after the claim. Created by `TickLock.claim()`; renew and release go through that lock."""

    def __init__(
        self,
        *,
        lock: TickLock,
        token: int,
        tick: datetime,
        holder: str,
        acquired_at: float,
        expires_at: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.token = token
        self.tick = tick
        self.holder = holder
        self.namespace = lock.namespace
        self.name = lock.name
        self.acquired_at = acquired_at
        self.expires_at = expires_at
        """Local monotonic time the grant expires unless renewed (measured from before the
        claim was sent, so no other replica can consider it expired earlier)."""
        self.lost = LostEvent()
        self.lost_reason = ""
        self.released = False
        self._lock = lock
        self._clock = clock

    def __repr__(self) -> str:
        return f"Grant({self.namespace}/{self.name} token={self.token} holder={self.holder})"

    @property
    def held(self) -> bool:
        """Not lost, not released and not expired by local time."""
        if self.lost.is_set() or self.released:
            return False
        if self._clock.monotonic() >= self.expires_at:
            self.mark_lost("the grant expired by local time before it was renewed")
            return False
        return True

    def assert_held(self) -> None:
        """Raise LostLockError unless the grant is still ours; call before a write that must
        not happen twice, and pass `token` where the store can check it."""
        if not self.held:
            reason = self.lost_reason or ("released" if self.released else "lost")
            raise LostLockError(
                f"lease {self.namespace}/{self.name}: grant {self.token} is gone ({reason})"
            )

    def mark_lost(self, reason: str) -> None:
        """Set `lost` (once) with a reason; listeners and waiters are woken."""
        if self.lost.is_set():
            return
        self.lost_reason = reason
        _log.warning(
            "grant lost", lease=self.name, namespace=self.namespace, token=self.token, reason=reason
        )
        self.lost.set()

    async def renew(self) -> bool:
        """Extend the grant by atMostFor. False when the store could not be reached (the
        grant may still be valid); a refused renewal marks the grant lost and returns False."""
        return await self._lock.renew(self)

    async def release(self) -> None:
        """Release honouring atLeastFor; never writes over a grant that is no longer ours."""
        await self._lock.release(self)

    def keep_alive(self, *, listeners: Sequence[Listener] = ()) -> KeepAlive:
        """A KeepAlive renewing this grant every atMostFor / 3 (start it, or `async with`)."""
        return self._lock.keep_alive(self, listeners=listeners)


class KeepAlive:
    """Renews a grant every atMostFor / 3 while the job runs; sets `lost` and tells the
    listeners when a renewal is refused or the grant would expire first.

    Use `async with KeepAlive(grant, listeners=[...]):` around the job, or start()/stop().
    """

    def __init__(
        self,
        grant: Grant,
        *,
        interval: float,
        listeners: Sequence[Listener] = (),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.grant = grant
        self.interval = interval
        self.listeners = list(listeners)
        self.renewals = 0
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._notifications: set[asyncio.Task[None]] = set()
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        grant.lost.on_set(self._lost_soon)

    async def __aenter__(self) -> KeepAlive:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name=f"keepalive {self.grant.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _lost_soon(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._notify_task)

    def _notify_task(self) -> None:
        task = asyncio.ensure_future(self._notify())
        self._notifications.add(task)
        task.add_done_callback(self._notifications.discard)

    async def _notify(self) -> None:
        for listener in self.listeners:
            await call_listener(
                listener,
                self.grant,
                self.grant.lost_reason,
                what="lost-lock listener",
                lease=self.grant.name,
                token=self.grant.token,
            )

    async def _run(self) -> None:
        grant = self.grant
        next_renew = self._clock.monotonic() + self.interval
        while True:
            now = self._clock.monotonic()
            wake = min(next_renew, grant.expires_at)
            if wake > now and await grant.lost.wait_async(wake - now):
                return
            # Expired by local time: `held` marks it lost, and nothing more is written.
            if not grant.held:
                return
            if self._clock.monotonic() < next_renew:
                continue
            if await grant.renew():
                self.renewals += 1
                next_renew = self._clock.monotonic() + self.interval
            else:  # unreachable store: try again soon, until the grant would expire
                next_renew = self._clock.monotonic() + min(self.interval, 1.0)
