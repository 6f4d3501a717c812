"""`Elector`: leader election on one Lease, for single-owner jobs and a group's scheduler
leader; client-go's LeaderElector with ReleaseOnCancel, written against a watch-fed view.

Owns the loop, the only place with timing: a leader renews every retryPeriod and steps down
at once (term.lost set, on_stopped_leading, LEADER gauge 0) when it has not renewed for
renewDeadline, then contends again: an elector never gives up for good. A standby sends no
request while a grant is live; it wakes when the Lease changes (a released Lease is taken
within milliseconds) or by a timer exactly at local expiry (observed_at + leaseDuration).
`stop(release=True)` stops the loop, ends the term (on_stopped_leading is awaited) and then
writes the release (holder "", duration 1 s) so a standby takes over at once.

A `Term` is valid until its last successful renewal + renewDeadline on the local monotonic
clock (`term.held`, `term.assert_held()`, from any thread), whether or not the loop got to
step down. A write whose reply was lost is read back before it counts as not written: an
acquire that landed starts the term it wrote. A Lease created by the elector starts above the
job's token floor (`floor=`), so a term's token never goes back.

Callbacks may be sync or async; exceptions in them are logged and never stop the loop.
on_started_leading runs as its own task, cancelled when the term ends. What it does not
promise (docs/design.md §7): that a leader paused between `assert_held()` and a write cannot write
after losing the term; the term's token (leaseTransitions) makes such stale writes detectable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Unpack

from structlog.typing import FilteringBoundLogger

from leasecron._logs import get_logger
from leasecron._metrics import LEADER, LEADERSHIP_CHANGES
from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.grants import Term, call_listener
from leasecron.coordination.resourcelocks import (
    ROLE_LEADER,
    LeaseLock,
    LeaseParty,
    LeaseStoreLike,
    PartyOptions,
)
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, OutcomeUnknown
from leasecron.models.clocks import Clock
from leasecron.models.configs import ElectionConfig
from leasecron.models.decisions import (
    Acquire,
    Renew,
    StandBy,
    decide_election,
    free_record,
    lost_reason,
)
from leasecron.models.leases import parse_lease

Callback = Callable[..., Any]
_WRITE_FAILURES = (KubeError, TimeoutError)
_MAYBE_WRITTEN = (OutcomeUnknown, TimeoutError)
"""Failures after which a write may have landed (no reply: lost, timed out, reset)."""


class _Listeners:
    """What one Elector tells of its leadership: the log, the LEADER gauge and the
    LEADERSHIP_CHANGES counter, and the user's callbacks. on_started_leading runs as the
    term's own task, cancelled when the term ends; on_stopped_leading is awaited; on_new_leader
    runs as a task of its own. An exception in a callback is logged, never raised."""

    def __init__(
        self,
        *,
        namespace: str,
        lease: str,
        log: FilteringBoundLogger,
        on_started: Callback | None,
        on_stopped: Callback | None,
        on_new_leader: Callback | None,
    ) -> None:
        self._namespace, self._lease, self._log = namespace, lease, log
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._on_new_leader = on_new_leader
        self.leader = ""
        """The holder last observed ("" when none)."""
        self._callbacks: set[asyncio.Task[None]] = set()
        self._term_task: asyncio.Task[None] | None = None

    def _count(self, event: str, *, leading: bool) -> None:
        LEADER.labels(lease_namespace=self._namespace, lease=self._lease).set(int(leading))
        LEADERSHIP_CHANGES.labels(
            lease_namespace=self._namespace, lease=self._lease, event=event
        ).inc()

    def started(self, term: Term) -> None:
        """`term` began: log, count, note its holder as the leader, start on_started_leading."""
        self._log.info("started leading", token=term.token)
        self._count("started", leading=True)
        self.observed(term.holder)
        if self._on_started is not None:
            self._term_task = asyncio.create_task(
                call_listener(
                    self._on_started,
                    term,
                    what="on_started_leading",
                    lease=self._lease,
                    token=term.token,
                ),
                name=f"term {term.token} of {self._lease}",
            )

    def stopping(self, term: Term, reason: str) -> None:
        """`term` is ending for `reason`: log and count (before its `lost` is set)."""
        self._log.warning("stopped leading", token=term.token, reason=reason)
        self._count("stopped", leading=False)

    async def stopped(self, term: Term) -> None:
        """`term` has ended: cancel its on_started_leading, then await on_stopped_leading."""
        task, self._term_task = self._term_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._on_stopped is not None:
            await call_listener(
                self._on_stopped,
                term,
                what="on_stopped_leading",
                lease=self._lease,
                token=term.token,
            )

    def observed(self, holder: str) -> None:
        """The Lease shows `holder`: when that is news, call on_new_leader in a task."""
        if holder == self.leader:
            return
        self.leader = holder
        if holder and self._on_new_leader is not None:
            task = asyncio.create_task(
                call_listener(self._on_new_leader, holder, what="on_new_leader", lease=self._lease)
            )
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)


async def _release(
    lease: LeaseLock,
    *,
    identity: str,
    token: int | None,
    clock: Clock,
    timeout: float,  # noqa: ASYNC109
    log: FilteringBoundLogger,
) -> None:
    """Write holder "" / duration 1 if the Lease still shows the term of `token` held by
    `identity`. After a conflict or a lost reply it reads the Lease back once and writes
    again only if that term is still there; any other failure leaves the Lease to expire."""
    for attempt in range(2):
        seen = lease.observe()
        if seen is None or token is None:
            return
        record = seen.observation.record
        if lost_reason(record, identity=identity, token=token) is not None:
            return
        try:
            await lease.update(
                free_record(record, now_wall=clock.now()), base=seen, timeout=timeout
            )
        except Conflict:
            if attempt == 0 and await lease.refresh(timeout=max(0.01, timeout)):
                continue
            return
        except _MAYBE_WRITTEN as e:
            log.info("release reply lost; reading the Lease back", error=repr(e))
            if attempt == 0 and await lease.refresh(timeout=max(0.01, timeout)):
                continue
            return
        except _WRITE_FAILURES as e:
            log.info("release failed; the lease will expire", error=repr(e))
            return
        log.info("released the lease", token=token)
        return


class Elector(LeaseParty):
    """Contends for one Lease forever (until stopped); leads while it holds it. What it tells
    of its leadership (log, metrics, callbacks) goes through its `_Listeners`."""

    role = ROLE_LEADER

    def __init__(
        self,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        *,
        config: ElectionConfig,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        on_new_leader: Callback | None = None,
        stagger: Callable[[], float] | None = None,
        **party: Unpack[PartyOptions],
    ) -> None:
        super().__init__(kube, cache, **party)
        self.config = config
        self._stagger = stagger
        self._log = get_logger("leasecron.coordination").bind(
            lease=self.name, namespace=self.namespace, identity=self.identity
        )
        self._listeners = _Listeners(
            namespace=self.namespace,
            lease=self.name,
            log=self._log,
            on_started=on_started_leading,
            on_stopped=on_stopped_leading,
            on_new_leader=on_new_leader,
        )
        self._term: Term | None = None
        self._last_token: int | None = None
        self._last_renew = 0.0
        self._last_attempt = 0.0
        self._stopping = False
        self._running = False
        self._leading_event = asyncio.Event()
        self._stopped_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- state ------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._term is not None

    @property
    def term(self) -> Term | None:
        return self._term

    @property
    def token(self) -> int | None:
        """The fencing token of the current term (None while not leading)."""
        return self._term.token if self._term is not None else None

    @property
    def leader(self) -> str:
        """The holder this elector last observed ("" when none)."""
        return self._listeners.leader

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self) -> None:
        """Contend and lead until `stop()`."""
        if self._running:
            raise RuntimeError(f"elector for {self.namespace}/{self.name} is already running")
        self._running, self._stopping = True, False
        self._stopped_event.clear()
        try:
            while not self._stopping:
                if self._term is None:
                    await self._contend()
                else:
                    await self._lead()
        finally:
            if self._term is not None:
                await self._step_down("the elector stopped")
            self._running = False
            self._stopped_event.set()

    def start(self) -> asyncio.Task[None]:
        """Run in a background task (idempotent)."""
        if self._task is not None and not self._task.done():
            return self._task
        if self._running:
            raise RuntimeError(f"elector for {self.namespace}/{self.name} is already running")
        self._task = asyncio.create_task(self.run(), name=f"elector {self.name}")
        return self._task

    async def stop(self, *, release: bool = True) -> None:
        """Stop contending; end the term (on_stopped_leading awaited), then release."""
        self._stopping = True
        self.lease.view.kick(self.namespace, self.name)
        if self._running:
            await self._stopped_event.wait()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if release:
            await _release(
                self.lease,
                identity=self.identity,
                token=self._last_token,
                clock=self._clock,
                timeout=self.config.renew_deadline.total_seconds(),
                log=self._log,
            )

    async def wait_leading(self, *, timeout: float | None = None) -> Term | None:  # noqa: ASYNC109
        """The term once this elector leads; None when `timeout` passes first."""
        try:
            await asyncio.wait_for(self._leading_event.wait(), timeout)
        except TimeoutError:
            return None
        return self._term

    @contextlib.asynccontextmanager
    async def leading(self) -> AsyncIterator[Term]:
        """`async with elector.leading() as term:` runs the elector (if not running), waits
        until it leads, and on exit stops it and releases the Lease."""
        if not self._running:
            self.start()
        try:
            term = None
            while term is None:
                term = await self.wait_leading()
            yield term
        finally:
            await self.stop(release=True)

    # --- standby ------------------------------------------------------------------------------

    def _changed_since(self, rv: str | None) -> Callable[[], bool]:
        def changed() -> bool:
            seen = self.lease.observe()
            return self._stopping or (seen.resource_version if seen else None) != rv

        return changed

    async def _wait_change(self, rv: str | None, timeout: float) -> bool:  # noqa: ASYNC109
        return await self.lease.view.wait_for(
            self.namespace, self.name, self._changed_since(rv), timeout=max(0.0, timeout)
        )

    async def _contend(self) -> None:
        seen = self.lease.observe()
        try:
            floor = await self._token_floor(seen)
        except _WRITE_FAILURES as e:
            self._log.info("could not read the token floor", error=repr(e))
            await self._pause()
            return
        decision = decide_election(
            **self._situation(seen),
            leading=False,
            config=self.config,
            floor=floor,
            job=self._floor is not None,
        )
        rv = seen.resource_version if seen is not None else None
        if isinstance(decision, StandBy):
            self._listeners.observed(decision.holder)
            await self._wait_change(rv, decision.until - self._clock.monotonic())
            return
        assert isinstance(decision, Acquire)
        delay = self._stagger() if self._stagger is not None else 0.0
        if delay > 0 and await self._wait_change(rv, delay):
            return  # the Lease changed while we waited: decide again
        await self._acquire(decision, seen)

    async def _acquire(self, decision: Acquire, seen: Seen | None) -> None:
        sent = self._clock.monotonic()
        timeout = self.config.renew_deadline.total_seconds()
        try:
            if decision.create:
                obj = await self.lease.create(decision.record, timeout=timeout)
            else:
                obj = await self.lease.update(decision.record, base=seen, timeout=timeout)
        except (Conflict, AlreadyExists):
            self._log.debug("lost the race for the lease")
            if not await self._refresh(timeout):
                await self._pause()
            return
        except _MAYBE_WRITTEN as e:
            # No reply: the write may have landed. Read back before calling it lost.
            self._log.info("acquire reply lost; reading the Lease back", error=repr(e))
            token = decision.record.transitions
            if await self._refresh(timeout) and self._shows_term(token):
                await self._start_term(token, sent)
            else:
                await self._pause()
            return
        except _WRITE_FAILURES as e:
            self._log.info("could not acquire the lease", error=repr(e))
            await self._pause()
            return
        await self._start_term(parse_lease(obj).transitions, sent)

    def _shows_term(self, token: int) -> bool:
        seen = self.lease.observe()
        record = seen.observation.record if seen is not None else None
        return lost_reason(record, identity=self.identity, token=token) is None

    async def _refresh(self, timeout: float) -> bool:  # noqa: ASYNC109
        """GET the Lease after a conflict so the next decision sees what won."""
        return await self.lease.refresh(timeout=max(0.01, timeout))

    async def _pause(self) -> None:
        """Wait one retryPeriod (or until stopped) after a failed write."""
        await self.lease.view.wait_for(
            self.namespace,
            self.name,
            lambda: self._stopping,
            timeout=self.config.retry_period.total_seconds(),
        )

    # --- leading ------------------------------------------------------------------------------

    def _taken_from(self, term: Term) -> str | None:
        seen = self.lease.observe()
        record = seen.observation.record if seen is not None else None
        return lost_reason(record, identity=self.identity, token=term.token)

    async def _lead(self) -> None:
        term = self._term
        assert term is not None
        retry = self.config.retry_period.total_seconds()
        step_down_at = self._last_renew + self.config.renew_deadline.total_seconds()
        next_attempt = self._last_attempt + retry
        now = self._clock.monotonic()
        reason = self._taken_from(term)
        if reason is None and now >= step_down_at:
            reason = "could not renew within renewDeadline"
        if reason is not None:
            await self._step_down(reason)
            return
        if now < next_attempt:
            await self.lease.view.wait_for(
                self.namespace,
                self.name,
                lambda: self._stopping or self._taken_from(term) is not None,
                timeout=min(next_attempt, step_down_at) - now,
            )
            return  # re-evaluate: stopping, taken, deadline or time to renew
        await self._renew(step_down_at)

    async def _renew(self, step_down_at: float) -> None:
        seen = self.lease.observe()
        situation = self._situation(seen)
        self._last_attempt = sent = situation["now_mono"]
        decision = decide_election(**situation, leading=True, config=self.config)
        if not isinstance(decision, Renew):
            holder = seen.observation.record.holder if seen is not None else ""
            await self._step_down(f"the Lease is held by {holder or 'nobody'} now")
            return
        try:
            await self.lease.update(decision.record, base=seen, timeout=step_down_at - sent)
        except Conflict:
            if await self._refresh(step_down_at - self._clock.monotonic()):
                self._last_attempt = 0.0  # retry at once with what the server said
            return
        except _WRITE_FAILURES as e:
            self._log.info("renew failed", token=self.token, error=repr(e))
            return
        self._last_renew = sent
        if self._term is not None:
            self._term.extend(sent + self.config.renew_deadline.total_seconds())

    async def _start_term(self, token: int, sent: float) -> None:
        term = Term(
            namespace=self.namespace,
            name=self.name,
            token=token,
            holder=self.identity,
            started_at=sent,
            expires_at=sent + self.config.renew_deadline.total_seconds(),
            clock=self._clock,
        )
        self._term, self._last_token = term, token
        self._last_renew = self._last_attempt = sent
        self._leading_event.set()
        self._listeners.started(term)

    async def _step_down(self, reason: str) -> None:
        term, self._term = self._term, None
        if term is None:
            return
        self._leading_event.clear()
        self._listeners.stopping(term, reason)
        term.lost.set()
        await self._listeners.stopped(term)
