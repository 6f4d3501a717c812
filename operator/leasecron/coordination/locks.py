"""`TickLock`: the claim of one tick on one Lease, the one claim write (docs/design.md §5.4).

`try_claim(tick)` waits out its stagger watching the process's Lease view (a tick that shows
up as taken costs no request), decides from the view with `models.decisions.decide_claim`,
and sends at most ONE conditional write. It returns a `Grant` or a `Skipped` value with its
reason (taken, live_grant, deadline, conflict, exists, store_unavailable, uncertain, error),
counted in SKIPS and logged at debug; `claim()` is the same with None for a skip.

A write whose reply is lost may have landed (docs/design.md §5.7): nothing here treats it as not
written without reading back. A claim that fails that way is read back at once; if the
read-back fails too, the claim is remembered as uncertain. A grant in this process's own
identity that the lock does not know (the uncertain claim landing, or a release that did not
land) is an orphan: it is adopted (handed to `on_orphan`, or released) or freed as soon as the
lock sees it, never left to expire, and a claim of a later tick may replace it.

The lock is the one owner of its grants' state: it marks a grant lost as soon as the view
shows another holder or token, and it keeps (and frees when it can) a grant it could not
release. It does not run handlers, create JobRuns or compute ticks: the runtime does. It does
not retry a failed claim: the next tick is the retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Unpack

from leasecron._logs import get_logger
from leasecron._metrics import SKIPS
from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.grants import Grant, KeepAlive, Listener, ReleaseResult
from leasecron.coordination.resourcelocks import LeaseParty, LeaseStoreLike, PartyOptions
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, OutcomeUnknown, Unavailable
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import (
    Claim,
    Lost,
    Release,
    Skip,
    decide_claim,
    decide_release,
    decide_renew,
    free_record,
    grant_live,
    lost_reason,
    orphaned,
)
from leasecron.models.leases import LeaseRecord, parse_lease
from leasecron.models.names import format_tick
from leasecron.models.vocabulary import SkipReason

SKIP_CONFLICT = SkipReason.CONFLICT
SKIP_EXISTS = SkipReason.EXISTS
SKIP_UNAVAILABLE = SkipReason.STORE_UNAVAILABLE
SKIP_UNCERTAIN = SkipReason.UNCERTAIN
SKIP_ERROR = SkipReason.ERROR
_MAYBE_WRITTEN = (OutcomeUnknown, TimeoutError)
_SETTLE_TIMEOUT = 5.0
"""Seconds a stopping caller's landed-but-unconfirmed claim is tried to be freed."""
"""Failures after which a write may have landed (no reply: lost, timed out, reset)."""
_FREE_RETRY_CAP = 5.0

OrphanHandler = Callable[[Grant], Awaitable[None]]
"""Takes over an adopted grant: run its tick, or release it."""


@dataclass(frozen=True)
class Skipped:
    """A claim that did not get the tick: `reason` is the SKIPS label, `holder` the holder
    the view showed. `unreachable` is True when the store could not be reached (nothing
    known says another replica has the tick)."""

    reason: str
    holder: str = ""

    @property
    def unreachable(self) -> bool:
        return self.reason in (SKIP_UNAVAILABLE, SKIP_UNCERTAIN)


@dataclass(frozen=True)
class _Uncertain:
    """A claim whose reply was lost and whose read-back failed."""

    tick: datetime
    sent: float
    replaced_tick: datetime | None
    replaced_unrun: bool
    replaced_created: datetime | None = None


class TickLock(LeaseParty):
    """Claims of the ticks of one job on its Lease, by one replica (`identity`)."""

    def __init__(
        self,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        *,
        config: LockConfig,
        job: str | None = None,
        on_orphan: OrphanHandler | None = None,
        request_timeout: float | None = None,
        **party: Unpack[PartyOptions],
    ) -> None:
        super().__init__(kube, cache, **party)
        self.config = config
        self.job = job or self.name
        self.on_orphan = on_orphan
        self._timeout = request_timeout
        self._log = get_logger("leasecron.coordination").bind(
            job=self.job, lease=self.name, namespace=self.namespace, identity=self.identity
        )
        self._grants: dict[int, Grant] = {}
        """Grants this lock handed out and that are not released yet."""
        self._mine = self.lease.view.mine(self.namespace, self.name, self.identity)
        """Tokens this process holds on purpose on the Lease (shared by all its locks)."""
        self._uncertain: dict[int, _Uncertain] = {}
        self._resolving: dict[int, asyncio.Task[None]] = {}
        self._unwatch = self.lease.view.watch(self.namespace, self.name, self._changed)

    # --- what is ours ------------------------------------------------------------------------

    def _known(self) -> set[int]:
        now = self._clock.monotonic()
        return {token for token, until in self._mine.items() if until > now}

    def _record(self) -> LeaseRecord | None:
        seen = self.lease.observe()
        return seen.observation.record if seen is not None else None

    def _changed(self, obj: dict[str, Any] | None) -> None:
        """Every change of the Lease: grants it no longer shows are lost; an orphan of ours is
        taken care of at once."""
        record = self.lease.view.record_of(obj) if obj is not None else None
        for grant in list(self._grants.values()):
            reason = self._lost_reason(record, grant)
            if reason is not None:
                self._forget(grant.token)
                grant.mark_lost(reason)
        if record is None:
            self._uncertain.clear()
            return
        for token in [t for t in self._uncertain if t < record.transitions]:
            del self._uncertain[token]  # overwritten by a later claim: it is nobody's now
        if orphaned(record, identity=self.identity, known=self._known()):
            self._resolve_soon(record.transitions)

    def _lost_reason(self, record: LeaseRecord | None, grant: Grant) -> str | None:
        """Why `record` no longer shows `grant` (None: it still does)."""
        return lost_reason(record, identity=self.identity, token=grant.token)

    def _replaceable(self) -> set[int]:
        """Tokens of our live grants a new claim may replace (none: a job never overlaps
        itself)."""
        return set()

    # --- claim ------------------------------------------------------------------------------

    def _taken(self, tick: datetime) -> bool:
        record = self._record()
        return record is not None and record.tick is not None and record.tick >= tick

    def taken(self, tick: datetime) -> bool:
        """Whether the Lease, as this process sees it, records `tick` or a later one."""
        return self._taken(tick)

    async def wait_taken(self, tick: datetime, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait (on the watch-fed view, sending nothing) until the Lease records `tick` or a
        later one; False when `timeout` seconds pass first."""
        return await self.lease.view.wait_for(
            self.namespace, self.name, lambda: self._taken(tick), timeout=timeout
        )

    def taken_by_other(self, tick: datetime) -> bool:
        """Whether what this process knows says another replica has `tick` or runs the job
        now: the Lease records `tick` or a later one, or another holder's grant is live."""
        seen = self.lease.observe()
        if seen is None:
            return False
        if self._taken(tick):
            return True
        record = seen.observation.record
        live = grant_live(
            seen.observation,
            now_mono=self._clock.monotonic(),
            fallback_s=self.config.lease_duration_s,
        )
        return live and record.holder != self.identity

    def _skip(self, reason: str, tick: datetime, **details: Any) -> Skipped:
        record = self._record()
        holder = record.holder if record is not None else ""
        SKIPS.labels(job_namespace=self.namespace, scheduled_job=self.job, reason=reason).inc()
        self._log.debug(
            "tick skipped", tick=format_tick(tick), reason=reason, holder=holder, **details
        )
        return Skipped(reason, holder)

    async def claim(
        self,
        tick: datetime,
        *,
        stagger: float = 0.0,
        starting_deadline: float | timedelta | None = None,
    ) -> Grant | None:
        """`try_claim`, with None for a skip (ShedLock's `lock(config) -> Lock | None`)."""
        result = await self.try_claim(tick, stagger=stagger, starting_deadline=starting_deadline)
        return result if isinstance(result, Grant) else None

    async def try_claim(
        self,
        tick: datetime,
        *,
        stagger: float = 0.0,
        starting_deadline: float | timedelta | None = None,
        above: int = 0,
    ) -> Grant | Skipped:
        """Claim `tick`: the Grant, or why not. The grant's token is above `above` (the
        highest token the jobs it covers had elsewhere) as well as above the Lease's."""
        if stagger > 0 and await self.wait_taken(tick, timeout=stagger):
            return self._skip(SkipReason.TAKEN, tick, waited=stagger)
        return await self._claim_now(tick, starting_deadline=starting_deadline, above=above)

    async def _claim_now(
        self, tick: datetime, *, starting_deadline: float | timedelta | None, above: int
    ) -> Grant | Skipped:
        """The claim itself, after the stagger: decide on what the view shows, then write."""
        if isinstance(starting_deadline, int | float):
            starting_deadline = timedelta(seconds=starting_deadline)
        seen = self.lease.observe()
        try:
            floor = max(await self._token_floor(seen), above)
        except KubeError as e:
            return self._skip(SKIP_UNAVAILABLE, tick, error=repr(e))
        decision = decide_claim(
            **self._situation(seen),
            tick=tick,
            config=self.config,
            starting_deadline=starting_deadline,
            known=self._known(),
            floor=floor,
            own=self._replaceable(),
        )
        if isinstance(decision, Skip):
            return self._skip(decision.reason, tick)
        sending = asyncio.ensure_future(self._send_claim(decision, seen, tick))
        try:
            return await asyncio.shield(sending)
        except asyncio.CancelledError:
            await self._settle(sending)
            raise

    async def _settle(self, sending: asyncio.Future[Grant | Skipped]) -> None:
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
            await self.release(result)
        elif result.reason == SKIP_UNCERTAIN:
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

    async def _send_claim(
        self, decision: Claim, seen: Seen | None, tick: datetime
    ) -> Grant | Skipped:
        sent = self._clock.monotonic()
        replaced = seen.observation.record.tick if seen is not None else None
        created = seen.observation.record.created if seen is not None else None
        token = decision.token
        self._mine[token] = math.inf
        try:
            if decision.create:
                obj = await self.lease.create(decision.record, timeout=self._timeout)
            else:
                obj = await self.lease.update(decision.record, base=seen, timeout=self._timeout)
        except Conflict:
            self._mine.pop(token, None)
            return self._skip(SKIP_CONFLICT, tick)
        except AlreadyExists:
            self._mine.pop(token, None)
            await self._learn_uncached()
            return self._skip(SKIP_EXISTS, tick)
        except _MAYBE_WRITTEN as e:
            pending = _Uncertain(tick, sent, replaced, decision.replaces_orphan, created)
            return await self._read_back(token, pending, base=seen, error=e)
        except Unavailable as e:
            self._mine.pop(token, None)
            return self._skip(SKIP_UNAVAILABLE, tick, error=e.message)
        except KubeError as e:
            self._mine.pop(token, None)
            self._log.warning("claim failed", tick=format_tick(tick), error=repr(e))
            return self._skip(SKIP_ERROR, tick)
        written = parse_lease(obj)
        return self._grant(
            written.transitions,
            _Uncertain(tick, sent, replaced, decision.replaces_orphan, created),
        )

    def _grant(self, token: int, claim: _Uncertain) -> Grant:
        grant = Grant(
            owner=self,
            namespace=self.namespace,
            name=self.name,
            token=token,
            tick=claim.tick,
            holder=self.identity,
            acquired_at=claim.sent,
            expires_at=claim.sent + self.config.lease_duration_s,
            replaced_tick=claim.replaced_tick,
            replaced_unrun=claim.replaced_unrun,
            lease_created=claim.replaced_created,
            clock=self._clock,
        )
        self._grants[token] = grant
        self._mine[token] = math.inf
        self._uncertain.pop(token, None)
        self._log.debug("tick claimed", tick=format_tick(claim.tick), token=token)
        return grant

    async def _read_back(
        self, token: int, claim: _Uncertain, *, base: Seen | None, error: BaseException
    ) -> Grant | Skipped:
        """The claim's reply was lost: one GET tells whether it landed. When that fails too,
        the claim is uncertain; if it did land, the view shows it later as our orphan."""
        self._log.info("claim reply lost; reading the Lease back", token=token, error=repr(error))
        try:
            await self.lease.get(timeout=self._timeout)
        except (KubeError, TimeoutError) as e:
            # Not ours on purpose any more: if it landed, it shows up as our orphan.
            self._mine.pop(token, None)
            self._uncertain[token] = claim
            return self._skip(SKIP_UNCERTAIN, claim.tick, error=repr(e))
        record = self._record()
        if record is not None and record.holder == self.identity and record.transitions == token:
            self._log.info("the lost claim landed: adopted", token=token)
            return self._grant(token, claim)
        self._mine.pop(token, None)
        unchanged = (
            record is not None
            and base is not None
            and (record.resource_version == base.resource_version)
        )
        reason = SKIP_UNAVAILABLE if unchanged or record is None else SKIP_CONFLICT
        return self._skip(reason, claim.tick, error=repr(error))

    async def _learn_uncached(self) -> None:
        """The Lease exists but the view did not know it (not selected by the cache, or the
        cache lags): one GET, so the next decision is based on it."""
        if self.lease.observe() is None:
            with contextlib.suppress(KubeError, TimeoutError):
                await self.lease.get(timeout=self._timeout)

    # --- orphans ------------------------------------------------------------------------------

    def _resolve_soon(self, token: int, free_at: float = 0.0) -> None:
        """Take care of our grant `token` (one task per token, however often it is asked):
        adopt it when it is an uncertain claim that landed, else free it at `free_at`."""
        if token in self._resolving:
            return
        task = asyncio.get_running_loop().create_task(
            self._resolve(token, free_at), name=f"resolve {self.name} {token}"
        )
        self._resolving[token] = task
        task.add_done_callback(lambda _: self._resolving.pop(token, None))

    async def _resolve(self, token: int, free_at: float) -> None:
        """Our own grant `token` that we have no record of, or could not release: adopt the
        uncertain claim it came from, or free it (after its atLeastFor hold, if it has one)."""
        claim = self._uncertain.pop(token, None)
        if claim is not None:
            grant = self._grant(token, claim)
            self._log.warning(
                "found our claim whose reply was lost", token=token, tick=format_tick(claim.tick)
            )
            if self.on_orphan is not None:
                await self.on_orphan(grant)
            else:
                await self.release(grant)
            return
        self._log.info("freeing a grant of ours that nothing runs under", token=token)
        await self._free_when_possible(token, free_at)

    async def _free_when_possible(self, token: int, free_at: float) -> None:
        """Free our grant `token` at `free_at` (local monotonic), retrying while the store
        cannot be reached, until it is free or no longer ours."""
        await asyncio.sleep(max(0.0, free_at - self._clock.monotonic()))
        delay = 0.25
        while True:
            seen = self.lease.observe()
            record = seen.observation.record if seen is not None else None
            if seen is None or lost_reason(record, identity=self.identity, token=token):
                self._forget(token)
                return
            if token in self._grants:
                return  # claimed for use again meanwhile (adopted)
            try:
                await self.lease.update(
                    free_record(seen.observation.record, now_wall=self._clock.now()),
                    base=seen,
                    timeout=self._timeout,
                )
                self._forget(token)
                return
            except Conflict:
                if not await self._refresh():
                    await asyncio.sleep(delay)
            except (KubeError, TimeoutError) as e:
                self._log.info("could not free our grant yet", token=token, error=repr(e))
                await asyncio.sleep(delay)
                delay = min(_FREE_RETRY_CAP, delay * 2)

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
                if attempt == 0 and await self._refresh():
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

    async def _refresh(self) -> bool:
        return await self.lease.refresh(timeout=self._timeout)

    async def release(self, grant: Grant) -> ReleaseResult:
        """Release honouring atLeastFor (see `decide_release`); says what it wrote. A grant
        whose release cannot be written now is kept and freed as soon as the store answers."""
        if grant.released:
            return ReleaseResult.NOT_OURS
        grant.released = True
        self._grants.pop(grant.token, None)
        if grant.lost.is_set():
            self._forget(grant.token)
            return ReleaseResult.NOT_OURS
        for attempt in range(2):
            seen = self.lease.observe()
            if seen is None:
                self._forget(grant.token)
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
                self._forget(grant.token)
                return ReleaseResult.NOT_OURS
            try:
                await self.lease.update(decision.record, base=seen, timeout=self._timeout)
            except Conflict:
                if attempt == 0 and await self._refresh():
                    continue
                return self._keep(grant, decision)
            except (KubeError, TimeoutError) as e:
                self._log.info("release failed; freeing it when the store answers", error=repr(e))
                return self._keep(grant, decision)
            if decision.free_at is None:
                self._forget(grant.token)
                return ReleaseResult.FREED
            self._mine[grant.token] = decision.free_at
            self._resolve_soon(grant.token, decision.free_at)
            return ReleaseResult.HELD
        self._forget(grant.token)
        return ReleaseResult.NOT_OURS

    def _forget(self, token: int) -> None:
        """`token` is no longer ours on purpose (freed, lost, or never landed)."""
        self._grants.pop(token, None)
        self._mine.pop(token, None)

    def _keep(self, grant: Grant, decision: Release) -> ReleaseResult:
        # Ours on purpose only while atLeastFor holds it; an orphan to free after that.
        free_at = decision.free_at or 0.0
        self._mine[grant.token] = free_at
        self._resolve_soon(grant.token, free_at)
        return ReleaseResult.KEPT

    def keep_alive(self, grant: Grant, *, listeners: Sequence[Listener] = ()) -> KeepAlive:
        """A KeepAlive for `grant` renewing every atMostFor / 3 (started by the caller)."""
        return KeepAlive(
            grant, interval=self.config.renew_interval_s, listeners=listeners, clock=self._clock
        )

    async def close(self) -> None:
        """Stop watching, cancel scheduled frees and orphan handling (the Lease then simply
        expires)."""
        self._unwatch()
        tasks = list(self._resolving.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
