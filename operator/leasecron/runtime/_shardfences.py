"""Fencing of runs claimed through a shard (docs/design.md, "The claim engine"): `RunFence`,
the fence one run gets under a shard grant (the grant's token, bounded by the job's own
atMostFor unless it is a keepAlive job), and `run_fence`, which holds one around a run.

A grant's local deadline is watched once for all the runs under it (`_GrantWatch`: one task
per grant while it has runs, woken at each deadline, which renewals push back), and a run's
own atMostFor by one timer: thousands of runs under one grant cost no task or wake-up each.

It does not claim or renew anything: `coordination.shards.ShardLock` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator
from datetime import timedelta

from leasecron.coordination import Grant
from leasecron.coordination.grants import Fence
from leasecron.models.clocks import Clock
from leasecron.models.specs import ScheduledJob


class RunFence(Fence):
    """The fence of one run under a shard grant: the grant's token, held while the grant is
    and for at most `at_most_for` from the run's start (None: as long as the grant)."""

    def __init__(self, grant: Grant, *, at_most_for: timedelta | None, clock: Clock) -> None:
        now_mono = clock.monotonic()
        bound = math.inf if at_most_for is None else at_most_for.total_seconds()
        super().__init__(
            namespace=grant.namespace,
            name=grant.name,
            token=grant.token,
            holder=grant.holder,
            expires_at=now_mono + bound,
            clock=clock,
        )
        self.grant = grant
        self._unlink = grant.lost.on_set(lambda: self.mark_lost(grant.lost_reason or "lost"))

    @property
    def held(self) -> bool:
        if not self.grant.held:
            self.mark_lost(self.grant.lost_reason or "the shard grant is gone")
        return super().held

    def _expired_reason(self) -> str:
        return "the run reached its atMostFor"

    def now(self) -> float:
        """The local monotonic time its deadlines are on."""
        return self._clock.monotonic()

    def close(self) -> None:
        self._unlink()

    def deadline(self) -> float:
        """Its own deadline or the grant's, whichever comes first."""
        return min(self.expires_at, self.grant.expires_at)


class _GrantWatch:
    """The one watchdog of a grant's local deadline while runs are under it: reading `held`
    past the deadline marks the grant lost, which marks every run's fence lost."""

    def __init__(self, grant: Grant) -> None:
        self._grant = grant
        self._users = 0
        self._task: asyncio.Task[None] | None = None

    def enter(self) -> None:
        self._users += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._grant.watch(), name=f"leasecron grant watch {self._grant.name}"
            )

    def leave(self) -> bool:
        """One run less; True when none is left (the watch is stopped)."""
        self._users -= 1
        if self._users > 0:
            return False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        return True


_WATCHES: dict[Grant, _GrantWatch] = {}
"""The watches of the grants that have runs under them now (a grant leaves with its last run)."""


def _watch_bound(fence: RunFence) -> Callable[[], None]:
    """A timer that marks `fence` lost at its own deadline (its atMostFor; reading `held`
    then marks it), again a little later if the clock has not reached it; the cancel."""
    if math.isinf(fence.expires_at):
        return lambda: None
    loop = asyncio.get_running_loop()
    handle: asyncio.TimerHandle | None = None

    def check() -> None:
        nonlocal handle
        if fence.held:
            handle = loop.call_later(max(0.01, fence.expires_at - fence.now()), check)

    handle = loop.call_later(max(0.01, fence.expires_at - fence.now()), check)
    return lambda: handle.cancel() if handle is not None else None


@contextlib.contextmanager
def run_fence(
    grant: Grant,
    job: ScheduledJob,
    *,
    clock: Clock,
    link: Callable[[RunFence], Callable[[], None]],
) -> Iterator[RunFence]:
    """The fence of one run of `job` under `grant`, watched (its atMostFor) for the length of
    the block; `link(fence)` ties the fence's loss to the run's stop and returns the unlink."""
    bound = None if job.spec.lock.keep_alive else job.spec.lock.at_most_for
    fence = RunFence(grant, at_most_for=bound, clock=clock)
    unlink = link(fence)
    watch = _WATCHES.get(grant)
    if watch is None:
        watch = _WATCHES[grant] = _GrantWatch(grant)
    watch.enter()
    cancel = _watch_bound(fence)
    try:
        yield fence
    finally:
        cancel()
        if watch.leave():
            _WATCHES.pop(grant, None)
        unlink()
        fence.close()
