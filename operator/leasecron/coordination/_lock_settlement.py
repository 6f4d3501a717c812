"""`ClaimSettlement`: what becomes of a `TickLock`'s claims whose outcome it does not know, and
of grants of ours that nothing runs under (docs/design.md §5.7).

A write whose reply is lost may have landed: nothing here treats it as not written without
reading back. A claim that fails that way is read back at once (`read_back`); if the
read-back fails too, the claim is remembered as uncertain. A grant in this process's own
identity that the lock does not know (the uncertain claim landing, or a release that did not
land) is an orphan: it is adopted (handed to `on_orphan`, or released) or freed as soon as the
lock sees it, never left to expire. A claim whose caller stopped while it was on the wire is
settled (`settle`): waited for, and handed back when it landed.

The grants themselves, and the tokens ours on purpose, are the lock's `GrantBook`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import TYPE_CHECKING, Any, Protocol

from structlog.typing import FilteringBoundLogger

from leasecron.coordination._lock_grants import GrantBook, SentClaim
from leasecron.coordination._views import Seen
from leasecron.coordination.grants import Grant
from leasecron.coordination.resourcelocks import LeaseLock
from leasecron.kube.errors import Conflict, KubeError
from leasecron.models.clocks import Clock
from leasecron.models.decisions import free_record, grant_live, lost_reason, orphaned
from leasecron.models.leases import LeaseRecord
from leasecron.models.names import format_tick
from leasecron.models.vocabulary import SkipReason

if TYPE_CHECKING:
    from datetime import datetime

    from leasecron.coordination.locks import OrphanHandler, Skipped

_SETTLE_TIMEOUT = 5.0
"""Seconds a stopping caller's landed-but-unconfirmed claim is tried to be freed."""
_FREE_RETRY_CAP = 5.0


class Skip(Protocol):
    """The lock's skip: counted in SKIPS, logged, and returned as a `Skipped`."""

    def __call__(self, reason: str, tick: datetime, **details: Any) -> Skipped: ...


class ClaimSettlement:
    """The uncertain claims and the orphans of one lock on `book.lease`."""

    def __init__(
        self,
        book: GrantBook,
        *,
        clock: Clock,
        timeout: float | None,
        log: FilteringBoundLogger,
        skip: Skip,
        on_orphan: OrphanHandler | None,
    ) -> None:
        self._book = book
        self.lease: LeaseLock = book.lease
        self.identity = book.identity
        self._clock = clock
        self._timeout = timeout
        self._log = log
        self._skip = skip
        self.on_orphan = on_orphan
        self._uncertain: dict[int, SentClaim] = {}
        self._resolving: dict[int, asyncio.Task[None]] = {}
        """The task taking care of each orphan token of ours (one per token)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Those tasks still going, adopted grants' handlers included (cancelled on close)."""

    def _record(self) -> LeaseRecord | None:
        seen = self.lease.observe()
        return seen.observation.record if seen is not None else None

    def changed(self, record: LeaseRecord | None) -> None:
        """A change of the Lease (`record`, None when it is gone): uncertain claims it
        overwrote are nobody's; an orphan of ours is taken care of at once."""
        if record is None:
            self._uncertain.clear()
            return
        for token in [t for t in self._uncertain if t < record.transitions]:
            del self._uncertain[token]  # overwritten by a later claim: it is nobody's now
        if orphaned(record, identity=self.identity, known=self._book.known()):
            self.resolve_soon(record.transitions)

    def grant(self, token: int, claim: SentClaim) -> Grant:
        """`claim` landed with `token`: the lock's grant (an uncertain claim no more)."""
        grant = self._book.add(token, claim)
        self._uncertain.pop(token, None)
        return grant

    def adopted(self, seen: Seen | None) -> bool:
        """Whether the orphan of ours that `seen` shows, which a claim was decided to
        replace, was adopted since (`_resolve`, run between the decision and the write): a
        grant of ours now, whose ticks run under it; the claim must not overwrite it."""
        return seen is not None and seen.observation.record.transitions in self._book.grants

    # --- lost replies ---------------------------------------------------------------------

    async def read_back(
        self, token: int, claim: SentClaim, *, base: Seen | None, error: BaseException
    ) -> Grant | Skipped:
        """The claim's reply was lost: one GET tells whether it landed. When that fails too,
        the claim is uncertain; if it did land, the view shows it later as our orphan."""
        self._log.info("claim reply lost; reading the Lease back", token=token, error=repr(error))
        try:
            await self.lease.get(timeout=self._timeout)
        except (KubeError, TimeoutError) as e:
            # Not ours on purpose any more: if it landed, it shows up as our orphan.
            self._book.mine.pop(token, None)
            self._uncertain[token] = claim
            return self._skip(SkipReason.UNCERTAIN, claim.tick, error=repr(e))
        record = self._record()
        if record is not None and record.holder == self.identity and record.transitions == token:
            self._log.info("the lost claim landed: adopted", token=token)
            return self.grant(token, claim)
        self._book.mine.pop(token, None)
        unchanged = (
            record is not None
            and base is not None
            and (record.resource_version == base.resource_version)
        )
        reason = (
            SkipReason.STORE_UNAVAILABLE if unchanged or record is None else SkipReason.CONFLICT
        )
        return self._skip(reason, claim.tick, error=repr(error))

    async def settle(self, sending: asyncio.Future[Grant | Skipped]) -> None:
        """The caller stopped (a replica shutting down) while its claim was on the wire: the
        claim is waited for (one write and at most one read-back, each bounded by the request
        timeout) and a claim that landed is handed back at once, so that the Lease is not
        left taken by a party that will neither run nor renew it until it expires."""
        try:
            result = await asyncio.shield(sending)
        except asyncio.CancelledError:
            self._log.info("stopped again while settling a claim; it may still land")
            return
        if isinstance(result, Grant):
            self._log.info(
                "handing back a claim that landed as its caller stopped",
                token=result.token,
                tick=format_tick(result.tick),
            )
            await self._book.release(result)
        elif result.reason == SkipReason.UNCERTAIN:
            await self._settle_uncertain()

    async def _settle_uncertain(self) -> None:
        """A stopping caller's claim whose reply and read-back were lost: one more read, and
        the claim is freed when it landed (else it shows up as our orphan and is freed)."""
        with contextlib.suppress(KubeError, TimeoutError):
            await self.lease.get(timeout=self._timeout)
        record = self._record()
        landed = record is not None and record.transitions in self._uncertain
        if record is not None and landed and record.holder == self.identity:
            del self._uncertain[record.transitions]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._free_when_possible(record.transitions, 0.0), _SETTLE_TIMEOUT
                )

    # --- orphans ------------------------------------------------------------------------------

    def resolve_soon(self, token: int, free_at: float = 0.0) -> None:
        """Take care of our grant `token` (one task per token, however often it is asked):
        adopt it when it is an uncertain claim that landed, else free it at `free_at`."""
        if token in self._resolving:
            return
        task = asyncio.get_running_loop().create_task(
            self._resolve(token, free_at), name=f"resolve {self.lease.name} {token}"
        )
        self._resolving[token] = task
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._resolved, token))

    def _resolved(self, token: int, task: asyncio.Task[None]) -> None:
        """`task`, that took care of `token`, ended (a later task for it may go on)."""
        self._tasks.discard(task)
        if self._resolving.get(token) is task:
            self._resolving.pop(token, None)

    async def _resolve(self, token: int, free_at: float) -> None:
        """Our own grant `token` that we have no record of, or could not release: adopt the
        uncertain claim it came from, or free it (after its atLeastFor hold, if it has one)."""
        claim = self._uncertain.pop(token, None)
        if claim is not None:
            grant = self.grant(token, claim)
            # Adopted: a grant like any other now, no orphan. A release of it that does not
            # land (here or in `on_orphan`) is freed as any is, by a task of its own.
            self._resolving.pop(token, None)
            self._log.warning(
                "found our claim whose reply was lost", token=token, tick=format_tick(claim.tick)
            )
            if self.on_orphan is not None:
                await self.on_orphan(grant)
            else:
                await self._book.release(grant)
            return
        self._log.info("freeing a grant of ours that nothing runs under", token=token)
        await self._free_when_possible(token, free_at)

    async def _free_when_possible(self, token: int, free_at: float) -> None:
        """Free our grant `token` at `free_at` (local monotonic), retrying while the store
        cannot be reached, until it is free, no longer ours, or expired by local time."""
        await asyncio.sleep(max(0.0, free_at - self._clock.monotonic()))
        delay = 0.25
        while True:
            seen = self.lease.observe()
            record = seen.observation.record if seen is not None else None
            if seen is None or lost_reason(record, identity=self.identity, token=token):
                self._book.forget(token)
                return
            if token in self._book.grants:
                return  # claimed for use again meanwhile (adopted)
            try:
                await self.lease.update(
                    free_record(seen.observation.record, now_wall=self._clock.now()),
                    base=seen,
                    timeout=self._timeout,
                )
                self._book.forget(token)
                return
            except Conflict:
                if not await self._book.refresh():
                    await asyncio.sleep(delay)
            except (KubeError, TimeoutError) as e:
                self._log.info("could not free our grant yet", token=token, error=repr(e))
                await asyncio.sleep(delay)
                delay = min(_FREE_RETRY_CAP, delay * 2)
            if not self._live():
                self._log.info("our grant expired before it could be freed", token=token)
                self._book.forget(token)
                return

    def _live(self) -> bool:
        """Whether the Lease, as this process sees it, shows a grant not expired by local
        time (once ours expired, there is nothing left to free)."""
        seen = self.lease.observe()
        return grant_live(
            seen.observation if seen is not None else None,
            now_mono=self._clock.monotonic(),
            fallback_s=self._book.config.lease_duration_s,
        )

    async def close(self) -> None:
        """Cancel scheduled frees and orphan handling (the Lease then simply expires)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
