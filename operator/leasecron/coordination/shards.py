"""`ShardLock`: the claim of one instant of one shard of a group's jobs (docs/design.md §5.3-§5.5).

A shard Lease is a `TickLock` Lease whose recorded tick is the last instant claimed for the
shard: one conditional write claims instant T for every job of the shard due at T, and its
token (leaseTransitions) is the fencing token of all of those runs. Everything the per-job
lock promises holds for it: one write per claim, lost replies read back, orphans adopted or
freed, token floors when the Lease is created again, a recorded tick that only grows.

What differs is how long a grant lives. The holder keeps the shard while any run of any of
its instants goes (`use()`): one keep-alive renews the newest grant every leaseDuration / 3
and extends every grant in use; when the last use ends, the newest grant is released. The
holder claims the shard's next instant over its own live grant (a new token; the runs of
the earlier instant keep theirs and stay valid while this replica holds the shard). Any other
replica skips a live grant, so all runs of a shard stay on one replica while any of them goes,
and a replica that dies or stops loses its shards after one short leaseDuration, not after
the jobs' atMostFor.

With the group's record (`group=`, a `coordination.groups.GroupRecord`) a shard Lease also
follows what the group agreed on: a claim whose token would be above the recorded ceiling
raises the ceiling first (so a shard Lease created again starts above every token any shard
Lease of the group carried, without reading run records); an instant at or before the
record's floor tick is taken; a retired shard Lease (its count was replaced) is never
claimed.

It does not run handlers, create JobRuns or bound a single run by its job's atMostFor: the
runtime does (`runtime._shards`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Unpack

from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.grants import Grant
from leasecron.coordination.locks import (
    SKIP_ERROR,
    SKIP_UNAVAILABLE,
    OrphanHandler,
    Skipped,
    TickLock,
)
from leasecron.coordination.resourcelocks import ROLE_SHARD, LeaseStoreLike, PartyOptions
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError, Unavailable
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import SKIP_TAKEN, Claim, expires_at, grant_live
from leasecron.models.groups import GroupRecordError, retired
from leasecron.models.leases import LeaseRecord, lease_annotations
from leasecron.models.names import LABEL_GROUP
from leasecron.models.shards import LABEL_SHARD, shard_lease_name
from leasecron.models.vocabulary import SkipReason

if TYPE_CHECKING:
    from leasecron.coordination.groups import GroupRecord

SKIP_RETIRED = SkipReason.RETIRED
"""The shard Lease's count was replaced (`leasecron.dev/retired`): nothing is claimed on it."""
SKIP_OTHER_COUNT = SkipReason.OTHER_SHARD_COUNT
"""The shard Lease belongs to another shard count than the group record's."""
SKIP_GROUP_UNREADABLE = SkipReason.GROUP_RECORD_UNREADABLE
"""The claim needs a higher token ceiling and the group record does not read."""
DEFAULT_SHARD_LEASE_S = 10
"""leaseDurationSeconds of a shard grant: how long a dead holder blocks its shards."""


def shard_config(lease_duration_s: int = DEFAULT_SHARD_LEASE_S) -> LockConfig:
    """The LockConfig of a shard Lease: renewed while runs go, nothing held after them."""
    return LockConfig(at_most_for=lease_duration_s, at_least_for=0, keep_alive=True)


class ShardLock(TickLock):
    """Claims of the instants of one shard, by one replica, and the holding of the shard
    while runs under those claims go."""

    role = ROLE_SHARD

    def __init__(
        self,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        *,
        config: LockConfig | None = None,
        request_timeout: float | None = None,
        group: GroupRecord | None = None,
        on_orphan: OrphanHandler | None = None,
        **party: Unpack[PartyOptions],
    ) -> None:
        self.group = group
        super().__init__(
            kube,
            cache,
            config=config or shard_config(),
            request_timeout=request_timeout,
            on_orphan=on_orphan,
            **party,
        )
        self._uses: dict[int, int] = {}
        """Token -> runs (or instants being planned) under that grant."""
        self._mutex = asyncio.Lock()
        self._idle = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._highest_used = 0

    # --- TickLock hooks -----------------------------------------------------------------------

    def _lost_reason(self, record: LeaseRecord | None, grant: Grant) -> str | None:
        """A grant stays ours while the Lease shows this identity (identities are unique per
        process incarnation): at a later token that is our own claim of a later instant, at
        an earlier one a watch event older than our write. Lost once it shows anyone else."""
        if record is None:
            return "the Lease was deleted"
        if record.holder != self.identity:
            return f"the Lease is held by {record.holder or 'nobody'} now"
        return None

    def _replaceable(self) -> set[int]:
        return {token for token, grant in self._book.grants.items() if grant.held}

    async def _claim_now(
        self, tick: datetime, *, starting_deadline: float | timedelta | None, above: int
    ) -> Grant | Skipped:
        """Never on a retired shard Lease, never an instant at or before the group's floor
        tick, and never while a release of this shard by this replica is in flight."""
        if self.retired():
            return self._skip(SKIP_RETIRED, tick)
        if self.group is not None and self.group.state.takes(tick):
            return self._skip(SKIP_TAKEN, tick, floor_tick=True)
        async with self._mutex:
            return await super()._claim_now(tick, starting_deadline=starting_deadline, above=above)

    def retired(self) -> bool:
        """Whether the shard Lease says its shard count was replaced."""
        seen = self.lease.observe()
        return seen is not None and retired(lease_annotations(seen.obj))

    def _taken(self, tick: datetime) -> bool:
        if self.group is not None and self.group.state.takes(tick):
            return True
        return super()._taken(tick)

    async def _token_floor(self, seen: Seen | None) -> int:
        """A shard Lease is created with a token above the group's ceiling, read from the
        store (the watch may lag a raise by another replica)."""
        floor = await super()._token_floor(seen)
        if seen is None and self.group is not None:
            state = await self.group.refresh()
            floor = max(floor, state.first_token - 1)
        return floor

    async def _send_claim(
        self, decision: Claim, seen: Seen | None, tick: datetime
    ) -> Grant | Skipped:
        """No shard Lease carries a token above the group's ceiling: raise it first."""
        if self.group is not None:
            try:
                await self.group.reserve(decision.token)
            except GroupRecordError as e:
                return self._skip(SKIP_GROUP_UNREADABLE, tick, error=str(e))
            except (Unavailable, TimeoutError) as e:
                return self._skip(SKIP_UNAVAILABLE, tick, error=repr(e))
            except KubeError as e:
                self._log.warning("raising the token ceiling failed", error=repr(e))
                return self._skip(SKIP_ERROR, tick, error=repr(e))
            if not self._of_recorded_count():
                return self._skip(SKIP_OTHER_COUNT, tick, shards=self.group.state.shards)
        return await super()._send_claim(decision, seen, tick)

    def _of_recorded_count(self) -> bool:
        """Whether this shard Lease is of the count the group record says (True while the
        record is not known: the first claim's reservation creates it with this count)."""
        group = self.group
        index = self.lease.labels.get(LABEL_SHARD, "")
        if group is None or group.lease.observe() is None or not index.isdigit():
            return True
        return self.name == shard_lease_name(group.group, int(index), shards=group.state.shards)

    async def wait_free(self, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait (on the watched Lease, sending nothing) until no other party's grant on it is
        live: released, or expired by local time; False when `timeout` seconds pass first."""
        clock = self._clock
        end = clock.monotonic() + timeout
        while self.held_by_other():
            seen = self.lease.observe()
            until = end
            if seen is not None:
                expiry = expires_at(seen.observation, fallback_s=self.config.lease_duration_s)
                until = min(end, expiry + 0.01)
            wait = until - clock.monotonic()
            if clock.monotonic() >= end:
                return False
            await self.lease.view.wait_for(
                self.namespace, self.name, lambda: not self.held_by_other(), timeout=max(0.01, wait)
            )
        return True

    def holding(self) -> bool:
        """Whether the Lease shows a live grant of ours: then only this replica can claim the
        shard's next instant, so it need not wait its turn."""
        record = self._record()
        return record is not None and record.transitions in self._replaceable()

    async def wait_claimable(self, tick: datetime, *, timeout: float) -> bool:  # noqa: ASYNC109
        """After a `live_grant` skip: wait until instant `tick` is taken (False), or the grant
        that blocked it is released or expired by local time (True: claim again), at most
        `timeout` seconds (False). No request is sent: the view is watch-fed."""
        clock = self._clock
        end = clock.monotonic() + timeout

        def settled() -> bool:
            seen = self.lease.observe()
            if self._taken(tick) or seen is None:
                return True
            return not grant_live(
                seen.observation,
                now_mono=clock.monotonic(),
                fallback_s=self.config.lease_duration_s,
            )

        while clock.monotonic() < end:
            seen = self.lease.observe()
            until = end
            if seen is not None:
                expiry = expires_at(seen.observation, fallback_s=self.config.lease_duration_s)
                until = min(end, expiry + 0.01)
            wait = max(0.01, until - clock.monotonic())
            if await self.lease.view.wait_for(self.namespace, self.name, settled, timeout=wait):
                return not self._taken(tick)
        return False

    # --- holding ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, grant: Grant) -> AsyncIterator[Grant]:
        """`async with lock.use(grant):` around work under `grant`; the shard is renewed
        while any use goes and released when the last one ends. Enter it right after the
        claim (a grant nobody used yet is never released by the keeper)."""
        self._uses[grant.token] = self._uses.get(grant.token, 0) + 1
        self._highest_used = max(self._highest_used, grant.token)
        self._idle.clear()
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(
                self._holding_loop(), name=f"hold {self.name}"
            )
        try:
            yield grant
        finally:
            left = self._uses.get(grant.token, 1) - 1
            if left > 0:
                self._uses[grant.token] = left
            else:
                self._uses.pop(grant.token, None)
            if not self._uses:
                self._idle.set()

    def _in_use(self) -> list[Grant]:
        return [self._book.grants[t] for t in sorted(self._uses) if t in self._book.grants]

    async def _holding_loop(self) -> None:
        """Renew the newest grant every leaseDuration / 3 while any use goes, extending every
        grant in use; release the newest once nothing uses the shard."""
        interval = self.config.renew_interval_s
        while True:
            await self._hold(interval)
            await self._release_all()
            if not self._uses:
                return
            # Runs go on under grants that are gone (lost, forgotten): wait for them to end
            # without spinning (a replica resumed after a pause would hold the loop here).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=min(interval, 1.0))

    async def _hold(self, interval: float) -> None:
        """Renew `interval` after the newest grant was claimed or last renewed (its deadline
        less two intervals), however late this task got to run: a claim answered late, or a
        loop busy starting the claim's runs, must not push the renewal past the deadline. A
        renewal that did not land is tried again after a short pause."""
        retry = min(interval, 1.0)
        not_before = 0.0  # after a renewal that did not land: the next attempt's earliest time
        while self._uses:
            newest = self._renewable()
            due = not_before
            if newest is not None:
                due = max(due, newest.expires_at - 2 * interval)
            wait = due - self._clock.monotonic()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), timeout=wait)
                continue  # woken early (idle) or on time: decide on what is known now
            grants = self._in_use()
            if not grants:
                break
            async with self._mutex:  # never racing our own claim of the next instant
                newest = self._renewable()
                if newest is None:
                    not_before = self._clock.monotonic() + retry
                    continue  # our own claim of a later instant is landing: it just renewed
                renewed = await self.renew(newest)
            not_before = 0.0 if renewed else self._clock.monotonic() + retry
            for grant in grants:
                if renewed:
                    grant.extend(newest.expires_at)
                elif newest.lost.is_set():
                    grant.mark_lost(newest.lost_reason)

    def _renewable(self) -> Grant | None:
        """The grant the Lease shows now, when it is one of ours this lock knows; None while
        our claim of a later instant is on its way (its reply not processed yet)."""
        record = self._record()
        if record is None:
            return max(self._in_use(), key=lambda g: g.token, default=None)
        return self._book.grants.get(record.transitions)

    async def _release_all(self) -> None:
        """Nothing runs under any grant of ours: free the Lease (the newest grant's release
        writes; older ones were replaced by it and write nothing)."""
        async with self._mutex:
            if self._uses:
                return  # a new use started meanwhile; its keeper releases later
            for token in sorted(self._book.grants):  # older ones first: they write nothing
                if token > self._highest_used:
                    continue  # claimed just now; its user has not entered `use` yet
                grant = self._book.grants.get(token)
                if grant is not None and not grant.released:
                    await self.release(grant)

    async def close(self, *, release_within: float = 2.0) -> None:
        """Stop holding: when nothing uses the shard any more, its release gets up to
        `release_within` seconds (so the others need not wait for it to expire); then
        renewals stop and the Lease, if still ours, simply expires."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not self._uses:
            await asyncio.wait([keeper], timeout=release_within)
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        await super().close()


def shard_labels(group: str, index: int) -> dict[str, str]:
    """Labels of a shard Lease (besides leasecron's own)."""
    return {LABEL_GROUP: group, LABEL_SHARD: str(index)}
