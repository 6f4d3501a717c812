"""`GrantBook`: the grants one `TickLock` handed out, and their renew, release and keep-alive
(docs/design.md §5.5).

The book is the one owner of its lock's grants' state: the grants not released yet, and the
tokens the process holds on purpose on the Lease (`mine`, shared by all its locks of that
Lease and identity: a token it holds on purpose is no orphan). It marks a grant lost as soon
as the Lease no longer shows it, and it keeps a grant whose release cannot be written now:
ours on purpose while atLeastFor holds it, then handed to `free_later` (the lock's
`ClaimSettlement`), which frees it as soon as the store answers. It sends no claim: the lock
does, and hands each claim that landed to `add`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from leasecron.coordination.grants import Grant, GrantOwner, KeepAlive, Listener, ReleaseResult
from leasecron.coordination.resourcelocks import LeaseLock
from leasecron.kube.errors import Conflict, KubeError
from leasecron.models.clocks import Clock
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import Lost, Release, decide_release, decide_renew
from leasecron.models.leases import LeaseRecord
from leasecron.models.names import format_tick

FreeLater = Callable[[int, float], None]
"""Frees our grant `token` at `free_at` (local monotonic), retrying until the store answers."""
LostReason = Callable[[LeaseRecord | None, Grant], str | None]
"""Why a Lease record no longer shows a grant (None: it still does)."""


@dataclass(frozen=True)
class SentClaim:
    """A claim as it was sent: what its grant records when it lands. Remembered as uncertain
    when its reply was lost and its read-back failed."""

    tick: datetime
    sent: float
    replaced_tick: datetime | None
    replaced_unrun: bool
    replaced_created: datetime | None = None
    moved: frozenset[str] = frozenset()


class GrantBook:
    """The grants of one lock (`owner`, through which they renew and release) on `lease`."""

    def __init__(
        self,
        owner: GrantOwner,
        lease: LeaseLock,
        *,
        identity: str,
        config: LockConfig,
        clock: Clock,
        timeout: float | None,
        log: FilteringBoundLogger,
        free_later: FreeLater,
    ) -> None:
        self._owner = owner
        self.lease = lease
        self.identity = identity
        self.config = config
        self._clock = clock
        self._timeout = timeout
        self._log = log
        self._free_later = free_later
        self.grants: dict[int, Grant] = {}
        """Grants this lock handed out and that are not released yet."""
        self.mine = lease.view.mine(lease.namespace, lease.name, identity)
        """Tokens this process holds on purpose on the Lease (shared by all its locks)."""

    # --- what is ours ------------------------------------------------------------------------

    def known(self) -> set[int]:
        now = self._clock.monotonic()
        return {token for token, until in self.mine.items() if until > now}

    def add(self, token: int, claim: SentClaim) -> Grant:
        """`claim` landed with `token`: a grant of this lock, ours on purpose."""
        grant = Grant(
            owner=self._owner,
            namespace=self.lease.namespace,
            name=self.lease.name,
            token=token,
            tick=claim.tick,
            holder=self.identity,
            acquired_at=claim.sent,
            expires_at=claim.sent + self.config.lease_duration_s,
            replaced_tick=claim.replaced_tick,
            replaced_unrun=claim.replaced_unrun,
            lease_created=claim.replaced_created,
            moved=claim.moved,
            clock=self._clock,
        )
        self.grants[token] = grant
        self.mine[token] = math.inf
        self._log.debug("tick claimed", tick=format_tick(claim.tick), token=token)
        return grant

    def drop_lost(self, record: LeaseRecord | None, lost_reason: LostReason) -> None:
        """A change of the Lease (`record`, None when it is gone): every grant it no longer
        shows (`lost_reason` says why) is lost and forgotten."""
        for grant in list(self.grants.values()):
            reason = lost_reason(record, grant)
            if reason is not None:
                self.forget(grant.token)
                grant.mark_lost(reason)

    def forget(self, token: int) -> None:
        """`token` is no longer ours on purpose (freed, lost, or never landed)."""
        self.grants.pop(token, None)
        self.mine.pop(token, None)

    # --- renew and release ----------------------------------------------------------------

    async def renew(self, grant: Grant) -> bool:
        """One keep-alive of `grant`; see `Grant.renew`."""
        for attempt in range(2):
            if not grant.held:
                return False
            seen = self.lease.observe()
            if seen is None:
                grant.mark_lost("the Lease is gone")
                return False
            decision = decide_renew(
                current=seen.observation.record,
                identity=self.identity,
                token=grant.token,
                config=self.config,
                now_wall=self._clock.now(),
            )
            if isinstance(decision, Lost):
                grant.mark_lost(decision.reason)
                return False
            sent = self._clock.monotonic()
            try:
                await self.lease.update(decision.record, base=seen, timeout=self._timeout)
            except Conflict:
                if attempt == 0 and await self.refresh():
                    continue
                return False
            except (KubeError, TimeoutError) as e:
                # No reply: the renewal may have landed; the grant is not extended locally
                # (the conservative side), and the next renewal's conflict reads it back.
                self._log.info("renew failed", token=grant.token, error=repr(e))
                return False
            grant.extend(sent + self.config.lease_duration_s)
            return True
        return False

    async def refresh(self) -> bool:
        return await self.lease.refresh(timeout=self._timeout)

    async def release(self, grant: Grant) -> ReleaseResult:
        """Release honouring atLeastFor (see `decide_release`); says what it wrote. A grant
        whose release cannot be written now is kept and freed as soon as the store answers."""
        if grant.released:
            return ReleaseResult.NOT_OURS
        grant.released = True
        self.grants.pop(grant.token, None)
        if grant.lost.is_set():
            self.forget(grant.token)
            return ReleaseResult.NOT_OURS
        for attempt in range(2):
            seen = self.lease.observe()
            if seen is None:
                self.forget(grant.token)
                return ReleaseResult.NOT_OURS
            decision = decide_release(
                current=seen.observation.record,
                identity=self.identity,
                token=grant.token,
                config=self.config,
                acquired_mono=grant.acquired_at,
                now_mono=self._clock.monotonic(),
                now_wall=self._clock.now(),
            )
            if not isinstance(decision, Release):
                self.forget(grant.token)
                return ReleaseResult.NOT_OURS
            try:
                await self.lease.update(decision.record, base=seen, timeout=self._timeout)
            except Conflict:
                if attempt == 0 and await self.refresh():
                    continue
                return self._keep(grant, decision)
            except (KubeError, TimeoutError) as e:
                self._log.info("release failed; freeing it when the store answers", error=repr(e))
                return self._keep(grant, decision)
            if decision.free_at is None:
                self.forget(grant.token)
                return ReleaseResult.FREED
            self.mine[grant.token] = decision.free_at
            self._free_later(grant.token, decision.free_at)
            return ReleaseResult.HELD
        self.forget(grant.token)
        return ReleaseResult.NOT_OURS

    def _keep(self, grant: Grant, decision: Release) -> ReleaseResult:
        # Ours on purpose only while atLeastFor holds it; an orphan to free after that.
        free_at = decision.free_at or 0.0
        self.mine[grant.token] = free_at
        self._free_later(grant.token, free_at)
        return ReleaseResult.KEPT

    def keep_alive(self, grant: Grant, *, listeners: Sequence[Listener] = ()) -> KeepAlive:
        """A KeepAlive for `grant` renewing every atMostFor / 3 (started by the caller)."""
        return KeepAlive(
            grant, interval=self.config.renew_interval_s, listeners=listeners, clock=self._clock
        )
