"""`StartPacer`: run starts let through a slice of event-loop time at a time.

A claim can make thousands of runs due on one instant (every job of a shard), and each start
costs the event loop a little (its record, its context, its handler task). Started all at
once, they take one loop iteration of seconds, and every timer and reply waiting behind them
waits as long: the shard grants' renewals among them, so the grants expire by local time and
the runs under them end `LostLock` (docs/benchmarks.md, "Loss at 10,000 jobs").

The pacer lets starts through at once while the current slice (`slice_s` of loop time) lasts
and queues the rest in arrival order; one loop iteration later it wakes the next batch of
them (twice as many as last time while they all fit in their slice, else as many as did; a
woken start that no longer fits waits for the next slice, first). So each iteration does
about one slice of start work, and whatever else is ready (a renewal's timer, its reply) runs
between slices, while the work around the starts does not slow them down. It does not bound
anything a handler does once it runs, and it does not reorder starts.

It also says when a burst begins and ends (`on_busy`): busy from the first claim in flight or
start queued until none is left, so that work which can wait (the garbage collector's scans,
`_collector.GcTuner.hold`) waits until the burst is through.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

DEFAULT_SLICE_S = 0.02
"""Loop time per slice of starts: small beside a grant's renewal interval (seconds)."""
CLAIM_HOLD_S = 2.0
"""How long a claim in flight holds up `idle` at most (seconds)."""


class StartPacer:
    """Admits run starts one slice of event-loop time at a time (one per event loop)."""

    def __init__(self, *, slice_s: float = DEFAULT_SLICE_S) -> None:
        if slice_s <= 0:
            raise ValueError(f"slice_s must be positive, not {slice_s!r}")
        self.slice_s = slice_s
        self._until: float | None = None
        """Loop time the open slice ends; None while no slice is open."""
        self._fitted = 0
        self._overflowed = False
        self._batch = 1
        """Queued starts woken per slice: doubled while they all fit, else those that did."""
        self._closing = False
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._again: deque[asyncio.Future[None]] = deque()
        """Woken when the slice was already full: first in the next slice, in order."""
        self._idle: list[asyncio.Future[None]] = []
        """Told (`idle`) once no start waits any more and no claim is in flight."""
        self._claims = 0
        """Claims of this replica not settled yet (`claiming`)."""
        self._busy = False
        self.on_busy: Callable[[bool], None] | None = None
        """Told True when a burst begins (a claim in flight or a start queued where there was
        none) and False once it is through (`idle` would return at once)."""

    @property
    def waiting(self) -> int:
        """Starts queued for a later slice."""
        return len(self._again) + len(self._waiting)

    def claiming(self, settled: asyncio.Future[None], *, at_most: float = CLAIM_HOLD_S) -> None:
        """A claim in flight until `settled` is done, or for `at_most` seconds (a claim that
        waits out another replica's live grant does not hold anything up): the records wait
        for it as they wait for queued starts, so an instant's claims land first and the API
        server's work on the records of the runs already started comes after them."""
        self._claims += 1
        self._tell_busy()
        timer: asyncio.TimerHandle | None = None

        def release(_settled: object = None) -> None:
            nonlocal timer
            if timer is None:
                return  # released already
            timer.cancel()
            timer = None
            self._claims -= 1
            self._tell_idle()

        timer = asyncio.get_running_loop().call_later(at_most, release)
        settled.add_done_callback(release)

    async def idle(self, timeout: float) -> None:  # noqa: ASYNC109
        """Return once no start waits its turn and no claim is in flight, or after `timeout`
        seconds: work that should not compete with a burst of claims and starts (the
        records of their runs) goes after them."""
        if not self.waiting and not self._claims:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle.append(future)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, timeout)

    async def turn(self) -> None:
        """Return when this start may go: at once while the open slice lasts and nobody is
        queued, else in a later slice, in arrival order."""
        loop = asyncio.get_running_loop()
        if not self.waiting and self._fits(loop):
            return
        queue = self._waiting
        while True:
            future: asyncio.Future[None] = loop.create_future()
            queue.append(future)
            self._tell_busy()
            self._close_soon(loop)
            await future
            if self._fits(loop):
                return
            queue = self._again

    def _fits(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether a start still fits in the open slice (opening one when none is)."""
        now = loop.time()
        if self._until is None:
            self._until = now + self.slice_s
            self._close_soon(loop)
        if now < self._until:
            self._fitted += 1
            return True
        self._overflowed = True
        return False

    def _close_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._closing:
            self._closing = True
            loop.call_soon(self._close, loop)

    def _close(self, loop: asyncio.AbstractEventLoop) -> None:
        """After the starts of a slice have taken their step: the slice is over; wake the
        next batch of queued starts (they run in the next iteration, then this runs again)."""
        self._closing = False
        if self._overflowed:
            self._batch = max(1, self._fitted)
        elif self._fitted >= self._batch:
            self._batch *= 2
        self._until, self._fitted, self._overflowed = None, 0, False
        woken = 0
        for queue in (self._again, self._waiting):
            while queue and woken < self._batch:
                future = queue.popleft()
                if not future.done():  # not cancelled while queued
                    future.set_result(None)
                    woken += 1
        if woken:
            # After the wake-ups: it runs once they have taken a step, and tells `idle` then.
            self._close_soon(loop)
        else:
            self._tell_idle()

    def _tell_busy(self) -> None:
        if not self._busy:
            self._busy = True
            if self.on_busy is not None:
                self.on_busy(True)

    def _tell_idle(self) -> None:
        if self.waiting or self._claims or self._closing:
            return  # (a slice still closing tells it once its starts have taken their step)
        if self._busy:
            self._busy = False
            if self.on_busy is not None:
                self.on_busy(False)
        idle, self._idle = self._idle, []
        for future in idle:
            if not future.done():  # not timed out meanwhile
                future.set_result(None)
