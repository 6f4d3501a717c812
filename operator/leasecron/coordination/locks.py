"""`TickLock`: the once-per-tick claim on a job's Lease (DESIGN §5, steps 1-3, 5, 6, 8).

`claim(tick)` waits out its stagger watching the process's Lease view (a tick that shows up
as taken costs no request), decides from the view with `models.decisions.decide_claim`, and
sends at most ONE conditional write. "Not acquired" is a value: None, counted in SKIPS by
reason (taken, live_grant, deadline, conflict, exists, store_unavailable, error) and logged at
debug. A `Grant` is marked lost as soon as the view shows another holder or a higher token.

It does not run handlers, create JobRuns or compute ticks: the runtime does. It does not
retry a failed claim: the next tick is the retry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from leasecron._logs import get_logger
from leasecron._metrics import SKIPS
from leasecron.coordination._views import LeaseCache, LeaseView, Seen
from leasecron.coordination.grants import Grant, KeepAlive, Listener
from leasecron.coordination.resourcelocks import (
    ROLE_JOB,
    LeaseLock,
    LeaseStoreLike,
)
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError, Unavailable
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
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
)
from leasecron.models.leases import parse_lease
from leasecron.models.names import format_tick


class TickLock:
    """Claims of the ticks of one job on its Lease, by one replica (`identity`)."""

    def __init__(
        self,
        kube: Kube | LeaseStoreLike,
        cache: LeaseCache | LeaseView | None,
        *,
        namespace: str,
        name: str,
        config: LockConfig,
        identity: str,
        clock: Clock = SYSTEM_CLOCK,
        job: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_reference: Mapping[str, Any] | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.config = config
        self.identity = identity
        self.job = job or name
        self._clock = clock
        self.lease = LeaseLock.open(
            kube,
            cache,
            clock=clock,
            namespace=namespace,
            name=name,
            role=ROLE_JOB,
            labels=labels,
            owner_reference=owner_reference,
        )
        self._log = get_logger("leasecron.coordination").bind(
            job=self.job, lease=name, namespace=namespace, identity=identity
        )
        self._deferred: set[asyncio.Task[None]] = set()
        self.last_skip = ""
        """Why the last claim returned None ("" after a grant): one of the SKIPS reasons,
        e.g. `store_unavailable` for a caller that may choose to run unguarded."""

    # --- claim ------------------------------------------------------------------------------

    def _taken(self, tick: datetime) -> bool:
        seen = self.lease.observe()
        recorded = seen.observation.record.tick if seen is not None else None
        return recorded is not None and recorded >= tick

    def _skip(self, reason: str, tick: datetime, **details: Any) -> None:
        self.last_skip = reason
        SKIPS.labels(job_namespace=self.namespace, scheduled_job=self.job, reason=reason).inc()
        self._log.debug("tick skipped", tick=format_tick(tick), reason=reason, **details)

    async def claim(
        self,
        tick: datetime,
        *,
        stagger: float = 0.0,
        starting_deadline: float | timedelta | None = None,
    ) -> Grant | None:
        """Claim `tick`; the Grant, or None (skipped: someone else has it, or cannot now;
        `last_skip` says why)."""
        self.last_skip = ""
        if stagger > 0 and await self.lease.view.wait_for(
            self.namespace, self.name, lambda: self._taken(tick), timeout=stagger
        ):
            self._skip("taken", tick, waited=stagger)
            return None
        if isinstance(starting_deadline, int | float):
            starting_deadline = timedelta(seconds=starting_deadline)
        seen = self.lease.observe()
        decision = decide_claim(
            current=seen.observation if seen is not None else None,
            tick=tick,
            identity=self.identity,
            config=self.config,
            now_mono=self._clock.monotonic(),
            now_wall=self._clock.now(),
            name=self.name,
            namespace=self.namespace,
            starting_deadline=starting_deadline,
        )
        if isinstance(decision, Skip):
            holder = seen.observation.record.holder if seen is not None else ""
            self._skip(decision.reason, tick, holder=holder)
            return None
        return await self._send_claim(decision, seen, tick)

    async def _send_claim(self, decision: Claim, seen: Seen | None, tick: datetime) -> Grant | None:
        sent = self._clock.monotonic()
        try:
            if decision.create:
                obj = await self.lease.create(decision.record)
            else:
                obj = await self.lease.update(decision.record, base=seen)
        except Conflict:
            self._skip("conflict", tick)
            return None
        except AlreadyExists:
            self._skip("exists", tick)
            await self._learn_uncached()
            return None
        except Unavailable as e:
            self._skip("store_unavailable", tick, error=e.message)
            return None
        except KubeError as e:
            self._log.warning("claim failed", tick=format_tick(tick), error=repr(e))
            self._skip("error", tick)
            return None
        written = parse_lease(obj)
        grant = Grant(
            lock=self,
            token=written.transitions,
            tick=tick,
            holder=self.identity,
            acquired_at=sent,
            expires_at=sent + self.config.lease_duration_s,
            clock=self._clock,
        )
        self._watch_grant(grant)
        self._log.debug("tick claimed", tick=format_tick(tick), token=grant.token)
        return grant

    async def _learn_uncached(self) -> None:
        """The Lease exists but the view did not know it (not selected by the cache, or the
        cache lags): one GET, so the next decision is based on it."""
        if self.lease.observe() is None:
            with contextlib.suppress(KubeError):
                await self.lease.get()

    def _watch_grant(self, grant: Grant) -> None:
        def changed(obj: dict[str, Any] | None) -> None:
            if grant.released or grant.lost.is_set():
                return
            if obj is None:
                grant.mark_lost("the Lease was deleted")
                return
            record = parse_lease(obj)
            if record.holder != grant.holder or record.transitions != grant.token:
                grant.mark_lost(f"the Lease is held by {record.holder or 'nobody'} now")

        unwatch = self.lease.view.watch(self.namespace, self.name, changed)
        grant.lost.on_set(unwatch)

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
                await self.lease.update(decision.record, base=seen)
            except Conflict:
                if attempt == 0 and await self._refresh():
                    continue
                return False
            except KubeError as e:
                self._log.info("renew failed", token=grant.token, error=repr(e))
                return False
            grant.expires_at = sent + self.config.lease_duration_s
            return True
        return False

    async def _refresh(self) -> bool:
        try:
            await self.lease.get()
        except KubeError:
            return False
        return True

    async def release(self, grant: Grant) -> None:
        """Release honouring atLeastFor (see `decide_release`); a later free is scheduled."""
        if grant.released or grant.lost.is_set():
            grant.released = True
            return
        grant.released = True
        for attempt in range(2):
            seen = self.lease.observe()
            if seen is None:
                return
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
                return
            try:
                await self.lease.update(decision.record, base=seen)
            except Conflict:
                if attempt == 0 and await self._refresh():
                    continue
                return
            except KubeError as e:
                self._log.info("release failed; the grant will expire", error=repr(e))
                return
            if decision.free_at is not None:
                self._defer_free(grant, decision.free_at)
            return

    def _defer_free(self, grant: Grant, free_at: float) -> None:
        async def free_later() -> None:
            await asyncio.sleep(max(0.0, free_at - self._clock.monotonic()))
            seen = self.lease.observe()
            if seen is None:
                return
            record = seen.observation.record
            if record.holder != self.identity or record.transitions != grant.token:
                return
            with contextlib.suppress(KubeError):
                await self.lease.update(free_record(record, now_wall=self._clock.now()), base=seen)

        task = asyncio.create_task(free_later(), name=f"free {self.name}")
        self._deferred.add(task)
        task.add_done_callback(self._deferred.discard)

    def keep_alive(self, grant: Grant, *, listeners: Sequence[Listener] = ()) -> KeepAlive:
        """A KeepAlive for `grant` renewing every atMostFor / 3 (started by the caller)."""
        return KeepAlive(
            grant, interval=self.config.renew_interval_s, listeners=listeners, clock=self._clock
        )

    async def close(self) -> None:
        """Cancel scheduled frees (the Lease then simply expires)."""
        for task in list(self._deferred):
            task.cancel()
        for task in list(self._deferred):
            with contextlib.suppress(asyncio.CancelledError):
                await task
