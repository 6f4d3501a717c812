"""`ShardLock`: the claim of one instant of one shard of a group's jobs (docs/design.md §5.3-§5.5).

A shard Lease is claimed by a `TickLock` under `ShardRules`; its recorded tick is the last
instant claimed for the shard: one conditional write claims instant T for every job of the
shard due at T, and its token (leaseTransitions) is the fencing token of all of those runs.
Everything the per-job lock promises holds for it: one write per claim, lost replies read back,
orphans adopted or freed, token floors when the Lease is created again, a recorded tick that
only grows.

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
from datetime import datetime
from typing import TYPE_CHECKING, Unpack

from leasecron._logs import get_logger
from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.grants import Grant
from leasecron.coordination.locks import (
    SKIP_ERROR,
    SKIP_UNAVAILABLE,
    OrphanHandler,
    Refusal,
    TickLock,
)
from leasecron.coordination.resourcelocks import ROLE_SHARD, LeaseStoreLike, PartyOptions
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError, Unavailable
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import SKIP_TAKEN, Claim, expires_at, grant_live, lost_reason
from leasecron.models.groups import GroupRecordError, retired
from leasecron.models.leases import LeaseRecord, lease_annotations
from leasecron.models.names import LABEL_GROUP, LABEL_JOB
from leasecron.models.shards import LABEL_SHARD, OWN_SHARD, ShardRef, shard_lease_name
from leasecron.models.vocabulary import SkipReason

if TYPE_CHECKING:
    from leasecron.coordination.groups import GroupRecord

SKIP_RETIRED = SkipReason.RETIRED
"""The shard Lease's count was replaced (`leasecron.dev/retired`): nothing is claimed on it."""
SKIP_OTHER_COUNT = SkipReason.OTHER_SHARD_COUNT
"""The shard Lease belongs to another shard count than the group record's."""
SKIP_GROUP_UNREADABLE = SkipReason.GROUP_RECORD_UNREADABLE
"""The claim needs a higher token ceiling and the group record does not read."""
_log = get_logger("leasecron.coordination")
DEFAULT_SHARD_LEASE_S = 10
"""leaseDurationSeconds of a shard grant: how long a dead holder blocks its shards."""


def shard_config(lease_duration_s: int = DEFAULT_SHARD_LEASE_S) -> LockConfig:
    """The LockConfig of a shard Lease: renewed while runs go, nothing held after them."""
    return LockConfig(at_most_for=lease_duration_s, at_least_for=0, keep_alive=True)


class ShardRules:
    """The claim rules of a shard Lease (`locks.ClaimRules`): a grant stays ours while the
    Lease shows this identity, the holder may claim over its own live grants, and with the
    group's record an instant at or before its floor tick is taken, a retired Lease or one of
    another count is never claimed, and a claim's token is reserved under the group's ceiling
    first. `mutex` is held from a claim's decision until its write is answered; the holding
    renews under it too, so a renewal never races this replica's own claim."""

    role = ROLE_SHARD

    def __init__(self, group: GroupRecord | None, *, over_own: bool = True) -> None:
        self.group = group
        self.over_own = over_own
        """Whether the holder claims over its own live grants (the engine's holding). A
        `job=` guard's lock does not: a body still going keeps the next tick from it, and
        its grant is lost to any later claim, ours included."""
        self.mutex = asyncio.Lock()

    def lost_reason(self, lock: TickLock, record: LeaseRecord | None, grant: Grant) -> str | None:
        """Ours while the Lease shows this identity (identities are unique per process
        incarnation): at a later token that is our own claim of a later instant, at an earlier
        one a watch event older than our write. Lost once it shows anyone else (without
        `over_own`, any other token)."""
        if not self.over_own:
            return lost_reason(record, identity=lock.identity, token=grant.token)
        if record is None:
            return "the Lease was deleted"
        if record.holder != lock.identity:
            return f"the Lease is held by {record.holder or 'nobody'} now"
        return None

    def replaceable(self, lock: TickLock) -> set[int]:
        if not self.over_own:
            return set()
        return {token for token, grant in lock.grants.items() if grant.held}

    def takes(self, tick: datetime) -> bool:
        return self.group is not None and self.group.state.takes(tick)

    def refusal(self, lock: TickLock, tick: datetime) -> Refusal | None:
        """Never on a retired shard Lease, never an instant at or before the floor tick."""
        if lease_retired(lock):
            return SKIP_RETIRED, {}
        if self.takes(tick):
            return SKIP_TAKEN, {"floor_tick": True}
        return None

    def claiming(self) -> asyncio.Lock:
        return self.mutex

    async def token_floor(self, seen: Seen | None, floor: int) -> int:
        """A shard Lease is created with a token above the group's ceiling, read from the
        store (the watch may lag a raise by another replica)."""
        if seen is None and self.group is not None:
            state = await self.group.refresh()
            floor = max(floor, state.first_token - 1)
        return floor

    async def before_write(self, lock: TickLock, decision: Claim, tick: datetime) -> Refusal | None:
        """No shard Lease carries a token above the group's ceiling: raise it first."""
        group = self.group
        if group is None:
            return None
        try:
            await group.reserve(decision.token)
        except GroupRecordError as e:
            return SKIP_GROUP_UNREADABLE, {"error": str(e)}
        except (Unavailable, TimeoutError) as e:
            return SKIP_UNAVAILABLE, {"error": repr(e)}
        except KubeError as e:
            _log.warning("raising the token ceiling failed", lease=lock.name, error=repr(e))
            return SKIP_ERROR, {"error": repr(e)}
        index = lock.lease.labels.get(LABEL_SHARD, "")
        if group.lease.observe() is None or not index.isdigit():
            return None  # the record is not known: the reservation creates it with this count
        if lock.name != shard_lease_name(group.group, int(index), shards=group.state.shards):
            return SKIP_OTHER_COUNT, {"shards": group.state.shards}
        return None


def lease_retired(lock: TickLock) -> bool:
    """Whether the lock's Lease says its shard count was replaced."""
    seen = lock.lease.observe()
    return seen is not None and retired(lease_annotations(seen.obj))


class ShardLock:
    """One replica's hold on one shard Lease: the claims of its instants (a `TickLock` under
    `ShardRules`, `claims`) and the holding of the shard while runs under them go."""

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
        self.rules = ShardRules(group)
        self.claims = claims = TickLock(
            kube,
            cache,
            config=config or shard_config(),
            request_timeout=request_timeout,
            on_orphan=on_orphan,
            rules=self.rules,
            **party,
        )
        self.lease, self.config, self.name = claims.lease, claims.config, claims.name
        self.namespace, self.identity = claims.namespace, claims.identity
        self.try_claim, self.wait_taken = claims.try_claim, claims.wait_taken
        self.taken = claims.taken
        self.held_by_other, self.taken_by_other = claims.held_by_other, claims.taken_by_other
        self.renew, self.release, self.keep_alive = claims.renew, claims.release, claims.keep_alive
        self._clock = claims.clock
        self._uses: dict[int, int] = {}
        """Token -> runs (or instants being planned) under that grant."""
        self._idle = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._highest_used = 0

    def retired(self) -> bool:
        """Whether the shard Lease says its shard count was replaced."""
        return lease_retired(self.claims)

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
        record = self.claims.record()
        return record is not None and record.transitions in self.rules.replaceable(self.claims)

    async def wait_claimable(self, tick: datetime, *, timeout: float) -> bool:  # noqa: ASYNC109
        """After a `live_grant` skip: wait until instant `tick` is taken (False), or the grant
        that blocked it is released or expired by local time (True: claim again), at most
        `timeout` seconds (False). No request is sent: the view is watch-fed."""
        clock = self._clock
        end = clock.monotonic() + timeout

        def settled() -> bool:
            seen = self.lease.observe()
            if self.taken(tick) or seen is None:
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
                return not self.taken(tick)
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
        grants = self.claims.grants
        return [grants[t] for t in sorted(self._uses) if t in grants]

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
            async with self.rules.mutex:  # never racing our own claim of the next instant
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
        record = self.claims.record()
        if record is None:
            return max(self._in_use(), key=lambda g: g.token, default=None)
        return self.claims.grants.get(record.transitions)

    async def _release_all(self) -> None:
        """Nothing runs under any grant of ours: free the Lease (the newest grant's release
        writes; older ones were replaced by it and write nothing)."""
        async with self.rules.mutex:
            if self._uses:
                return  # a new use started meanwhile; its keeper releases later
            grants = self.claims.grants
            for token in sorted(grants):  # older ones first: they write nothing
                if token > self._highest_used:
                    continue  # claimed just now; its user has not entered `use` yet
                grant = grants.get(token)
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
        await self.claims.close()


def shard_labels(group: str, ref: ShardRef) -> dict[str, str]:
    """Labels of a shard Lease (besides leasecron's own); a job's own shard Lease also names
    its job."""
    if ref.job is not None:
        return {LABEL_GROUP: group, LABEL_SHARD: OWN_SHARD, LABEL_JOB: ref.job}
    return {LABEL_GROUP: group, LABEL_SHARD: str(ref.shard)}
