"""Grants and fencing: what a successful claim hands to the code that runs the job.

Owns `Fence`, the one fencing value (token, holder, a `lost` event and a deadline on the
local monotonic clock: `held` / `assert_held()`), its two forms `Grant` (one tick claim: tick,
`renew()`, `release()`) and `Term` (one ownership term of an elector), `LostLockError`,
`LostEvent` (a `threading.Event` that also wakes asyncio waiters and listeners, so it can be
set and read from sync or async code), and `KeepAlive`, which wraps a grant: it renews every
atMostFor / 3 and, when a renewal is refused or the grant would expire, sets `lost` and
notifies its listeners (whose exceptions are logged and never reach the job).

Not promised (docs/design.md §7): `assert_held()` checks the local deadline and what this
process has seen; a process paused between that check and its write can still write after
losing the grant. The token is what lets a
store reject such a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from leasecron._logs import get_logger
from leasecron.models.clocks import SYSTEM_CLOCK, Clock

_log = get_logger("leasecron.coordination")

Listener = Callable[["Grant", str], Awaitable[object] | object]
"""Called with the grant and the reason when it is lost; may be sync or async."""


class LostLockError(RuntimeError):
    """The grant is gone: lost to another holder, expired by local time, or released."""


class LostEvent(threading.Event):
    """A threading.Event whose `set()` also runs registered callbacks once (from the setting
    thread). `wait_async()` awaits it from a coroutine without blocking the loop.

    Its Condition is made when a thread first waits on it: every run has one or two of these
    and nearly none is waited on by a thread (a threading.Condition is a dozen objects, made
    and collected per run on the start path)."""

    def __init__(self) -> None:  # threading.Event's state, but its Condition made lazily
        self._flag = False
        self._waiters_cond: threading.Condition | None = None
        self._callbacks: dict[int, Callable[[], None]] = {}
        """By registration number: removed in O(1) (a grant has a callback per run)."""
        self._next = 0
        self._guard = threading.Lock()

    @property
    def _cond(self) -> threading.Condition:
        """threading.Event's Condition, made on first use (`wait`, `clear`)."""
        with self._guard:
            if self._waiters_cond is None:
                self._waiters_cond = threading.Condition(threading.Lock())
            return self._waiters_cond

    def _at_fork_reinit(self) -> None:
        if self._waiters_cond is not None:
            self._waiters_cond._at_fork_reinit()  # type: ignore[attr-defined]
        self._guard = threading.Lock()

    def set(self) -> None:
        with self._guard:
            if self._flag:
                return
            self._flag = True
            cond = self._waiters_cond
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        if cond is not None:  # a waiter made it: it checks the flag under its lock
            with cond:
                cond.notify_all()
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _log.exception("lost callback failed")

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when the event is set (at once if it already is); returns a
        function that unregisters it."""
        with self._guard:
            if not self._flag:
                number, self._next = self._next, self._next + 1
                self._callbacks[number] = callback
                return lambda: self._remove(number)
        callback()
        return lambda: None

    def _remove(self, number: int) -> None:
        with self._guard:
            self._callbacks.pop(number, None)

    async def wait_async(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Await the event; False when `timeout` seconds pass first."""
        if self.is_set():
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # loop closed meanwhile
                loop.call_soon_threadsafe(resolve)

        remove = self.on_set(wake)
        timer = None if timeout is None else loop.call_later(max(0.0, timeout), resolve)
        try:
            await future
        finally:
            remove()
            if timer is not None:
                timer.cancel()
        return self.is_set()


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


class Fence:
    """A fencing value: `token` held by `holder` on one Lease, valid until `expires_at` on
    the local monotonic clock unless extended by a successful renewal.

    Tick grants and ownership terms are the same idea and share this one check: `held` is
    False once `lost` is set or the local deadline has passed, whatever the event loop is
    doing, so it can be read from any thread (a stalled loop or a SIGSTOP cannot keep it
    true past its deadline)."""

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        token: int,
        holder: str,
        expires_at: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.token = token
        self.holder = holder
        self.expires_at = expires_at
        """Local monotonic time the fence ends unless extended (measured from before the
        write that granted or renewed it, so no other replica can consider it over earlier)."""
        self.lost = LostEvent()
        self.lost_reason = ""
        self._clock = clock

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.namespace}/{self.name} token={self.token} "
            f"holder={self.holder})"
        )

    @property
    def held(self) -> bool:
        """Not lost and not past its local deadline (marks it lost once the deadline passed)."""
        if self.lost.is_set():
            return False
        if self._clock.monotonic() >= self.expires_at:
            self.mark_lost(self._expired_reason())
            return False
        return True

    def _expired_reason(self) -> str:
        return "the grant expired by local time before it was renewed"

    def assert_held(self) -> None:
        """Raise LostLockError unless still held; call before a write that must not happen
        twice, and pass `token` where the store can check it."""
        if not self.held:
            raise LostLockError(
                f"lease {self.namespace}/{self.name}: token {self.token} of {self.holder} "
                f"is gone ({self.lost_reason or 'lost'})"
            )

    def deadline(self) -> float:
        """When (local monotonic) the fence stops being held unless extended first."""
        return self.expires_at

    async def watch(self) -> None:
        """Return once the fence is lost: taken, or past its deadline."""
        while self.held:
            await self.lost.wait_async(max(0.01, self.deadline() - self._clock.monotonic()))

    def extend(self, until: float) -> None:
        """A renewal succeeded: the fence now lasts until `until` (never shortened)."""
        self.expires_at = max(self.expires_at, until)

    def mark_lost(self, reason: str) -> None:
        """Set `lost` (once) with a reason; listeners and waiters are woken."""
        if self.lost.is_set():
            return
        self.lost_reason = reason
        _log.warning(
            "grant lost", lease=self.name, namespace=self.namespace, token=self.token, reason=reason
        )
        self.lost.set()


class Term(Fence):
    """One ownership term of an elector: the token is the Lease's leaseTransitions for it.
    Valid until the last successful renewal + renewDeadline (the elector extends it)."""

    def __init__(self, *, started_at: float, **fence: Any) -> None:
        super().__init__(**fence)
        self.started_at = started_at

    @property
    def identity(self) -> str:
        return self.holder

    def _expired_reason(self) -> str:
        return "the term was not renewed within renewDeadline"


class ReleaseResult(StrEnum):
    """What `Grant.release()` did."""

    FREED = "freed"
    """The Lease was written free (holder "")."""
    HELD = "held"
    """The Lease was written held until acquire + atLeastFor; it is freed then."""
    NOT_OURS = "not_ours"
    """The Lease no longer shows this grant: nothing was written (or a lost reply landed)."""
    KEPT = "kept"
    """The write could not be made now: the lock keeps the grant and frees it when it can."""


class GrantOwner(Protocol):
    """What a Grant needs of the lock that issued it."""

    async def renew(self, grant: Grant) -> bool: ...

    async def release(self, grant: Grant) -> ReleaseResult: ...

    def keep_alive(self, grant: Grant, *, listeners: Sequence[Listener] = ()) -> KeepAlive: ...


class Grant(Fence):
    """One successful claim of one tick: the fencing token is the Lease's leaseTransitions
    after the claim. Created by `TickLock.claim()`; renew and release go through that lock.

    `replaced_tick` is the tick the Lease recorded in the version the claim's conditional
    write replaced (the high-water mark catch-up plans from); `replaced_unrun` is True when
    that version was an earlier grant of this process that never ran (a claim whose reply
    was lost), so its tick counts as not run; `lease_created` is that version's
    creationTimestamp (None when the claim created the Lease)."""

    def __init__(
        self,
        *,
        owner: GrantOwner,
        tick: datetime,
        acquired_at: float,
        replaced_tick: datetime | None = None,
        replaced_unrun: bool = False,
        lease_created: datetime | None = None,
        moved: frozenset[str] = frozenset(),
        **fence: Any,
    ) -> None:
        super().__init__(**fence)
        self.tick = tick
        self.acquired_at = acquired_at
        self.replaced_tick = replaced_tick
        self.replaced_unrun = replaced_unrun
        self.lease_created = lease_created
        self.moved = moved
        """Jobs the Lease said had moved to Leases of their own when this claim was decided
        (`leasecron.dev/moved.<job>`): nothing of theirs runs under this grant."""
        self.released = False
        self._owner = owner

    @property
    def held(self) -> bool:
        """Not lost, not released and not expired by local time."""
        return not self.released and super().held

    def assert_held(self) -> None:
        if self.released and not self.lost.is_set():
            raise LostLockError(
                f"lease {self.namespace}/{self.name}: grant {self.token} is gone (released)"
            )
        super().assert_held()

    async def renew(self) -> bool:
        """Extend the grant by atMostFor. False when the store could not be reached (the
        grant may still be valid); a refused renewal marks the grant lost and returns False."""
        return await self._owner.renew(self)

    async def release(self) -> ReleaseResult:
        """Release honouring atLeastFor; never writes over a grant that is no longer ours.
        Says what it did; a grant it could not release now is kept and freed later."""
        return await self._owner.release(self)

    def keep_alive(self, *, listeners: Sequence[Listener] = ()) -> KeepAlive:
        """A KeepAlive renewing this grant every atMostFor / 3 (start it, or `async with`)."""
        return self._owner.keep_alive(self, listeners=listeners)


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
