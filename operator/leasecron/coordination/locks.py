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

`TickLock` is the claim write and the facade: the grants, their renew, release and
keep-alive are its `GrantBook`'s (`_lock_grants`); the lost replies read back, the uncertain
claims and the orphans adopted or freed are its `ClaimSettlement`'s (`_lock_settlement`).
What a kind of Lease adds to the claim is its `ClaimRules`, given to the lock: `JobRules` (a
job's own Lease, a guard's) by default, `shards.ShardRules` for a shard Lease. Nothing
subclasses the lock; every kind of Lease is claimed by this one write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, Unpack

from leasecron._logs import get_logger
from leasecron._metrics import SKIPS
from leasecron.coordination._lock_grants import GrantBook, SentClaim
from leasecron.coordination._lock_settlement import ClaimSettlement
from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.grants import Grant, KeepAlive, Listener, ReleaseResult
from leasecron.coordination.resourcelocks import LeaseParty, LeaseStoreLike, PartyOptions
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, OutcomeUnknown, Unavailable
from leasecron.models.configs import LockConfig
from leasecron.models.decisions import Claim, Skip, decide_claim, grant_live, lost_reason
from leasecron.models.groups import moved_jobs
from leasecron.models.leases import LeaseRecord, lease_annotations, parse_lease
from leasecron.models.names import ANNOTATION_CLAIMER, format_tick
from leasecron.models.vocabulary import Role, SkipReason

SKIP_CONFLICT = SkipReason.CONFLICT
SKIP_EXISTS = SkipReason.EXISTS
SKIP_UNAVAILABLE = SkipReason.STORE_UNAVAILABLE
SKIP_UNCERTAIN = SkipReason.UNCERTAIN
SKIP_ERROR = SkipReason.ERROR
_MAYBE_WRITTEN = (OutcomeUnknown, TimeoutError)
"""Failures after which a write may have landed (no reply: lost, timed out, reset)."""
_PRECISE_S = 0.002
"""The end of a claim's stagger slept in the loop's thread rather than on an asyncio timer."""

OrphanHandler = Callable[[Grant], Awaitable[None]]
"""Takes over an adopted grant: run its tick, or release it."""

Refusal = tuple[str, dict[str, Any]]
"""A skip reason and the details logged with it."""


class ClaimRules(Protocol):
    """What a kind of Lease adds to the one claim (`TickLock`), asked at each of its steps.
    Rules read what the lock shows them; only the lock writes the Lease."""

    role: Role
    """`leasecron.dev/role` of the Lease."""

    def lost_reason(self, lock: TickLock, record: LeaseRecord | None, grant: Grant) -> str | None:
        """Why `record` no longer shows `grant` (None: it still does)."""

    def replaceable(self, lock: TickLock) -> set[int]:
        """Tokens of the lock's live grants a new claim may replace."""

    def takes(self, tick: datetime) -> bool:
        """Whether `tick` is taken whatever the Lease records."""

    def refusal(self, lock: TickLock, tick: datetime) -> Refusal | None:
        """Why `tick` is not to be claimed on this Lease at all (None: decide on the Lease)."""

    def claiming(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held from the decision until the claim's write is answered."""

    async def token_floor(self, seen: Seen | None, floor: int) -> int:
        """The lowest token the claim may take, given the job's `floor`."""

    async def before_write(self, lock: TickLock, decision: Claim, tick: datetime) -> Refusal | None:
        """Done before the claim's write; a refusal skips the write."""


class JobRules:
    """The rules of a job's own Lease (a guard's): a grant is ours while the Lease shows our
    identity and token; a claim never replaces a live grant of ours (a job never overlaps
    itself); only the Lease's recorded tick says a tick is taken."""

    role = Role.SHARD

    def lost_reason(self, lock: TickLock, record: LeaseRecord | None, grant: Grant) -> str | None:
        return lost_reason(record, identity=lock.identity, token=grant.token)

    def replaceable(self, lock: TickLock) -> set[int]:
        return set()

    def takes(self, tick: datetime) -> bool:
        return False

    def refusal(self, lock: TickLock, tick: datetime) -> Refusal | None:
        return None

    def claiming(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return contextlib.nullcontext()

    async def token_floor(self, seen: Seen | None, floor: int) -> int:
        return floor

    async def before_write(self, lock: TickLock, decision: Claim, tick: datetime) -> Refusal | None:
        return None


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
        rules: ClaimRules | None = None,
        **party: Unpack[PartyOptions],
    ) -> None:
        self.rules: ClaimRules = rules or JobRules()
        self.role = self.rules.role
        super().__init__(kube, cache, **party)
        self.config = config
        self.job = job or self.name
        self._timeout = request_timeout
        self._log = get_logger("leasecron.coordination").bind(
            job=self.job, lease=self.name, namespace=self.namespace, identity=self.identity
        )
        self._book = GrantBook(
            self,
            self.lease,
            identity=self.identity,
            config=config,
            clock=self._clock,
            timeout=request_timeout,
            log=self._log,
            free_later=self._free_later,
        )
        """The grants this lock handed out, and the tokens ours on purpose."""
        self._settlement = ClaimSettlement(
            self._book,
            clock=self._clock,
            timeout=request_timeout,
            log=self._log,
            skip=self._skip,
            on_orphan=on_orphan,
        )
        """Claims whose reply was lost, and grants of ours that nothing runs under."""
        self._unwatch = self.lease.view.watch(self.namespace, self.name, self._changed)
        self.last_claimed: datetime | None = None
        """The tick of this lock's last claim that got its grant."""

    @property
    def on_orphan(self) -> OrphanHandler | None:
        """Takes over an adopted grant (None: the lock releases it)."""
        return self._settlement.on_orphan

    @on_orphan.setter
    def on_orphan(self, handler: OrphanHandler | None) -> None:
        self._settlement.on_orphan = handler

    def _free_later(self, token: int, free_at: float) -> None:
        self._settlement.resolve_soon(token, free_at)

    # --- what is ours ------------------------------------------------------------------------

    def record(self) -> LeaseRecord | None:
        """The Lease's record as this process sees it (None: no Lease)."""
        seen = self.lease.observe()
        return seen.observation.record if seen is not None else None

    @property
    def grants(self) -> Mapping[int, Grant]:
        """Token -> each grant this lock handed out and has not forgotten."""
        return self._book.grants

    def _changed(self, obj: dict[str, Any] | None) -> None:
        """Every change of the Lease: grants it no longer shows are lost; an orphan of ours is
        taken care of at once."""
        record = self.lease.view.record_of(obj) if obj is not None else None
        self._book.drop_lost(record, functools.partial(self.rules.lost_reason, self))
        self._settlement.changed(record)

    # --- claim ------------------------------------------------------------------------------

    def taken(self, tick: datetime) -> bool:
        """Whether `tick` is taken as this process sees it: the Lease records it or a later
        one (or the rules say so)."""
        if self.rules.takes(tick):
            return True
        record = self.record()
        return record is not None and record.tick is not None and record.tick >= tick

    async def wait_taken(self, tick: datetime, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait (on the watch-fed view, sending nothing) until the Lease records `tick` or a
        later one; False when `timeout` seconds pass first."""
        return await self.lease.view.wait_for(
            self.namespace, self.name, lambda: self.taken(tick), timeout=timeout
        )

    def held_by_other(self) -> bool:
        """Whether the Lease, as this process sees it, shows another party's live grant (not
        released, not expired by local time)."""
        seen = self.lease.observe()
        if seen is None:
            return False
        record = seen.observation.record
        live = grant_live(
            seen.observation,
            now_mono=self._clock.monotonic(),
            fallback_s=self.config.lease_duration_s,
        )
        return live and record.holder != self.identity

    def taken_by_other(self, tick: datetime) -> bool:
        """Whether what this process knows says another replica has `tick` or runs the job
        now: `tick` is taken (the Lease records it or a later one), or another holder's grant
        is live (`held_by_other`)."""
        return self.taken(tick) or self.held_by_other()

    def _skip(self, reason: str, tick: datetime, **details: Any) -> Skipped:
        record = self.record()
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
        if stagger > 0 and await self._wait_stagger(tick, stagger):
            return self._skip(SkipReason.TAKEN, tick, waited=stagger)
        return await self._claim_now(tick, starting_deadline=starting_deadline, above=above)

    async def _wait_stagger(self, tick: datetime, stagger: float) -> bool:
        """Wait `stagger` seconds on the view; True as soon as it shows `tick` taken. An
        asyncio timer fires a millisecond or two late (epoll's timeouts are whole
        milliseconds, rounded up), so the last `_PRECISE_S` are slept in this thread: a claim
        goes out when its stagger ends (a placed replica's, at its instant), not after."""
        loop = asyncio.get_running_loop()
        end = loop.time() + stagger
        if await self.wait_taken(tick, timeout=max(0.0, stagger - _PRECISE_S)):
            return True
        left = end - loop.time()
        if left > 0:  # the loop is held meanwhile, so the view cannot change: not taken
            time.sleep(left)  # noqa: ASYNC251 (at most _PRECISE_S: the claim's own moment)
        return False

    async def _claim_now(
        self, tick: datetime, *, starting_deadline: float | timedelta | None, above: int
    ) -> Grant | Skipped:
        """The claim itself, after the stagger: decide on what the view shows, then write."""
        refused = self.rules.refusal(self, tick)
        if refused is not None:
            return self._skip(refused[0], tick, **refused[1])
        if isinstance(starting_deadline, int | float):
            starting_deadline = timedelta(seconds=starting_deadline)
        async with self.rules.claiming():
            return await self._decide_and_write(tick, starting_deadline, above)

    async def _decide_and_write(
        self, tick: datetime, starting_deadline: timedelta | None, above: int
    ) -> Grant | Skipped:
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
            known=self._book.known(),
            floor=floor,
            own=self.rules.replaceable(self),
        )
        if isinstance(decision, Skip):
            return self._skip(decision.reason, tick)
        sending = asyncio.ensure_future(self._send_claim(decision, seen, tick))
        try:
            result = await asyncio.shield(sending)
        except asyncio.CancelledError:
            await self._settlement.settle(sending)
            raise
        if isinstance(result, Grant):
            self.last_claimed = tick
        return result

    def claimed_last(self) -> bool:
        """Whether the tick the Lease records is one this lock claimed: the replica that ran
        the previous tick, which may claim the next without waiting its turn."""
        record = self.record()
        return record is not None and record.tick is not None and record.tick == self.last_claimed

    async def _token_floor(self, seen: Seen | None) -> int:
        return await self.rules.token_floor(seen, await super()._token_floor(seen))

    async def _send_claim(
        self, decision: Claim, seen: Seen | None, tick: datetime
    ) -> Grant | Skipped:
        refused = await self.rules.before_write(self, decision, tick)
        if refused is not None:
            return self._skip(refused[0], tick, **refused[1])
        if decision.replaces_orphan and self._settlement.adopted(seen):
            return self._skip(SKIP_CONFLICT, tick)  # decide again: a grant of ours now
        sent = self._clock.monotonic()
        replaced = seen.observation.record.tick if seen is not None else None
        created = seen.observation.record.created if seen is not None else None
        moved = moved_jobs(lease_annotations(seen.obj)) if seen is not None else frozenset()
        token = decision.token
        mine = self._book.mine
        mine[token] = math.inf
        try:
            claimer = {ANNOTATION_CLAIMER: self.identity}
            if decision.create:
                obj = await self.lease.create(
                    decision.record, timeout=self._timeout, annotations=claimer
                )
            else:
                obj = await self.lease.update(
                    decision.record, base=seen, timeout=self._timeout, annotations=claimer
                )
        except Conflict:
            mine.pop(token, None)
            return self._skip(SKIP_CONFLICT, tick)
        except AlreadyExists:
            mine.pop(token, None)
            await self._learn_uncached()
            return self._skip(SKIP_EXISTS, tick)
        except _MAYBE_WRITTEN as e:
            pending = SentClaim(tick, sent, replaced, decision.replaces_orphan, created, moved)
            return await self._settlement.read_back(token, pending, base=seen, error=e)
        except Unavailable as e:
            mine.pop(token, None)
            return self._skip(SKIP_UNAVAILABLE, tick, error=e.message)
        except KubeError as e:
            mine.pop(token, None)
            self._log.warning("claim failed", tick=format_tick(tick), error=repr(e))
            return self._skip(SKIP_ERROR, tick)
        written = parse_lease(obj)
        return self._settlement.grant(
            written.transitions,
            SentClaim(tick, sent, replaced, decision.replaces_orphan, created, moved),
        )

    async def _learn_uncached(self) -> None:
        """The Lease exists but the view did not know it (not selected by the cache, or the
        cache lags): one GET, so the next decision is based on it."""
        if self.lease.observe() is None:
            with contextlib.suppress(KubeError, TimeoutError):
                await self.lease.get(timeout=self._timeout)

    # --- renew and release (the GrantBook's) ------------------------------------------------

    async def renew(self, grant: Grant) -> bool:
        """One keep-alive of `grant`; see `Grant.renew`."""
        return await self._book.renew(grant)

    async def release(self, grant: Grant) -> ReleaseResult:
        """Release honouring atLeastFor (see `decide_release`); says what it wrote. A grant
        whose release cannot be written now is kept and freed as soon as the store answers."""
        return await self._book.release(grant)

    def keep_alive(self, grant: Grant, *, listeners: Sequence[Listener] = ()) -> KeepAlive:
        """A KeepAlive for `grant` renewing every atMostFor / 3 (started by the caller)."""
        return self._book.keep_alive(grant, listeners=listeners)

    async def close(self) -> None:
        """Stop watching, cancel scheduled frees and orphan handling (the Lease then simply
        expires)."""
        self._unwatch()
        await self._settlement.close()
