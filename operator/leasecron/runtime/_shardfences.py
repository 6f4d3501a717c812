"""Fencing of runs claimed through a shard (docs/claims.md): `RunFence`, the fence one run
gets under a shard grant (the grant's token, bounded by the job's own atMostFor), and
`ShardFloors`, the token floors a shard Lease starts above when it is created (again).

It does not claim or renew anything: `coordination.shards.ShardLock` does.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from leasecron.coordination import Grant
from leasecron.coordination.floors import highest_token
from leasecron.coordination.grants import Fence
from leasecron.kube.jobruns import JobRunStore
from leasecron.models.clocks import Clock
from leasecron.models.shards import ShardRef, shard_of
from leasecron.runtime._services import Services


class RunFence(Fence):
    """The fence of one run under a shard grant: the grant's token, held while the grant is
    and for at most the job's atMostFor from the run's start."""

    def __init__(self, grant: Grant, *, at_most_for: timedelta, clock: Clock) -> None:
        now_mono = clock.monotonic()
        super().__init__(
            namespace=grant.namespace,
            name=grant.name,
            token=grant.token,
            holder=grant.holder,
            expires_at=now_mono + at_most_for.total_seconds(),
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


class ShardFloors:
    """Token floors of the shard Leases (read only when a shard Lease is to be created): the
    highest fencing token on record for any job of the shard (`coordination.floors.
    highest_token` over its JobRuns), from one list of the namespace's JobRuns shared by all
    shards for a few seconds."""

    def __init__(self, services: Services, *, ttl: float = 5.0) -> None:
        self._services, self._ttl = services, ttl
        self._read: tuple[float, dict[str, int]] | None = None
        """When the JobRuns were listed, and each job's highest token in them."""
        self._guard = asyncio.Lock()

    async def floor(self, ref: ShardRef) -> int:
        async with self._guard:
            services = self._services
            now = services.clock.monotonic()
            if self._read is None or now - self._read[0] > self._ttl:
                tokens: dict[str, int] = {}
                for run in await JobRunStore(services.kube).list(namespace=services.namespace):
                    job = (run.get("spec") or {}).get("job")
                    if isinstance(job, str):
                        tokens[job] = max(tokens.get(job, 0), highest_token(job=job, runs=[run]))
                self._read = (now, tokens)
            tokens = self._read[1]
        return max(
            (t for job, t in tokens.items() if shard_of(job, shards=ref.shards) == ref.shard),
            default=0,
        )
