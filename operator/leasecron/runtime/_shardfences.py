"""Fencing of runs claimed through a shard (docs/design.md, "The claim engine"): `RunFence`,
the fence one run gets under a shard grant (the grant's token, bounded by the job's own
atMostFor unless it is a keepAlive job), and `run_fence`, which holds one around a run.

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

    def close(self) -> None:
        self._unlink()

    def deadline(self) -> float:
        """Its own deadline or the grant's, whichever comes first."""
        return min(self.expires_at, self.grant.expires_at)


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
    watchdog = asyncio.get_running_loop().create_task(fence.watch())
    try:
        yield fence
    finally:
        watchdog.cancel()
        unlink()
        fence.close()
