"""Guards: one body per tick across replicas for functions that something else schedules.

Teams that already run APScheduler, Celery beat or a timer loop on every replica keep every
replica's trigger and let a lock decide who runs each tick (ShedLock's answer)::

    @leasecron.runtime.guard("send-reminders", every="1m")
    def send_reminders(batch: int) -> int: ...

    result = send_reminders(10)   # GuardResult: truthy when this replica ran the body

    g = Guard("nightly-report", cron="0 2 * * *", time_zone="Europe/Berlin")
    with g.claim() as run:        # `async with g.claim(tick=fire_time) as run:` too
        if not run:
            return                # run.reason says why
        write(report, token=run.token)

Inside a guarded body `current_run()` is the run (token, tick, held, assert_held, lost).

Observed like a Scheduler's runs (`_observe`): `Guard(hooks=[fn])` and the decorators
`on_start`, `on_success`, `on_failure`, `on_skip` get `RunEvent`s (started when the body
starts, succeeded/failed when it ended, `error` the body's exception, skipped with the reason
of every tick this replica did not run), and each run is a span `leasecron.run <job>`, a
child of the caller's current span, current around the body (in the caller's thread for a
sync body). Plain hooks run on the hooks' own thread, never in the caller's.

Promises (the per-tick promises of a once-per-tick ScheduledJob, docs/design.md §5):

- **At most one body per tick across replicas** while the Lease protocol holds: every claim
  is `coordination.TickLock.try_claim` on the guard's Lease `leasecron-guard-<name>` (a
  tick lock of no group, role `shard`), which keeps the claimed tick's high-water mark, so a
  replica whose clock runs late, or whose trigger fires after another replica ran the tick,
  skips it (`taken`). Conditional writes only; a lost reply is read back; an orphan grant is
  adopted or freed. A replica that sees the tick claimed (the Lease cache is watch-fed) sends
  nothing: `stagger` spreads the replicas' claims at random so that usually one writes.
- **Fencing**: `run.token` is the grant's token and never decreases while the Lease exists; a
  `job=` guard's Lease is created above the highest token the job ever had on record.
- **The tick**: the caller's fire time when known (`claim(tick=...)`, or the `tick=`
  callable), else the latest tick of `every` (aligned to the Unix epoch) / `cron` (in
  `time_zone`) / the job's schedule at or before now; whole seconds. With `snap=True` (on
  the guard, or one `claim(snap=True)`) a fire time is moved to the latest tick of that
  schedule at or before it (for a `job=` guard, the ScheduledJob's, read at claim time), so
  replicas whose triggers count intervals from their own start claim the same tick. No body
  starts after its start-by time (`deadline`): the caller's own fire time +
  `starting_deadline` (so a trigger at another phase than the grid is not late by its
  phase), for a `job=` guard the tick + the job's startingDeadline. A tick at or before the
  latest one the process saw claimed is `taken`, even after the Lease was deleted.
- **A short Lease**: the guard's Lease lasts `lease_duration` (10 s) and is renewed every
  third of it while the body runs, so a holder that dies mid-body blocks the guard that long;
  `at_most_for` bounds the run (with `keep_alive=False` the grant is released at
  `at_most_for` and the body told through `run.lost`).
- **Skips are values** (`reason`: taken, live_grant, deadline, conflict, exists,
  store_unavailable, uncertain, suspended, no_job, record_failed, error), logged at debug and
  counted in `leasecron_skips_total`; runs are counted in `leasecron_runs_total`, both with
  `scheduled_job=<guard name>`. The store out of reach is a skip (fail closed); an internal
  failure is logged and a skip with reason `error`, never an exception in the caller's
  scheduler thread. The body's own exception propagates, after its grant is released and its
  outcome recorded.
- **With `job=`** (a once-per-tick ScheduledJob; any other bucket is a GuardConfigError naming
  spec.bucket) the job's schedule, timeZone, lock, startingDeadline and suspend apply, and
  each run writes one JobRun as the Scheduler does (Running before the body starts, then its
  outcome; holder, token, tick), so the operator's status and missed-run alarms see it.
- **Threads and loops**: sync callers share one background event loop, one Kube client and one
  Lease cache per namespace, started on first use; a guard called from a thread blocks that
  thread only, and the body runs in the caller's thread. Async bodies make an async wrapper,
  which runs on the caller's loop (one shared runtime per loop). `close_guards()` (also at exit)
  and `await aclose_guards()` release the grants and stop the caches. No signal handlers.

Not promised (docs/design.md §7): exactly-once. A replica paused longer than its grant can
still write after losing it; the body is never interrupted (it is told through `run.lost` and
`assert_held()`), and the token is what lets a store reject a stale write. `onStoreUnavailable:
RunLocally` and catch-up do not apply to guards: the caller's scheduler decides what fires.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable
from contextlib import ExitStack
from datetime import datetime
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from leasecron._logs import get_logger
from leasecron.kube.clients import Kube
from leasecron.kube.servertime import ServerTime
from leasecron.models.clocks import SYSTEM_CLOCK, Clock, OffsetClock, SystemClock
from leasecron.models.configs import DurationLike
from leasecron.runtime._environment import default_namespace, resolve_identity
from leasecron.runtime._guard_engine import Engine
from leasecron.runtime._guard_runs import GuardResult, GuardRun, enter, leave
from leasecron.runtime._guard_runtime import GuardRuntime, background, for_running_loop
from leasecron.runtime._guard_settings import (
    DEFAULT_STAGGER,
    GuardConfigError,
    GuardSettings,
    TickSource,
    fire_time,
)
from leasecron.runtime._hooks import HookDecorators, RunHook, RunHooks
from leasecron.runtime._observe import observe_start

P = ParamSpec("P")
R = TypeVar("R")
_log = get_logger("leasecron.runtime.guards")


class Guard(HookDecorators):
    """A lock for the ticks of one function that something else schedules (see the module
    docstring). Every parameter after `name` is keyword-only and checked here: a
    GuardConfigError names the parameter and the value. `snap`: fire times are snapped onto
    the schedule by default; `hooks` are told of every run and skip (`RunEvent`);
    `lease_duration` (default 10s, the Scheduler's shard Lease): how long a holder that dies
    mid-body blocks the guard (renewed every third of it while the body runs); `store_time`
    (default on, for the system clock): "now" is the API server's clock, estimated from its
    responses, so a host whose clock runs ahead neither claims ticks early nor takes the tick
    before them (the first claim of a guard reads the clock before any response)."""

    def __init__(
        self,
        name: str,
        *,
        every: DurationLike | None = None,
        cron: str | None = None,
        time_zone: str | None = None,
        tick: TickSource | None = None,
        job: str | None = None,
        namespace: str | None = None,
        kube: Kube | None = None,
        identity: str | None = None,
        at_most_for: DurationLike | None = None,
        at_least_for: DurationLike | None = None,
        keep_alive: bool | None = None,
        starting_deadline: DurationLike | None = None,
        stagger: DurationLike = DEFAULT_STAGGER,
        snap: bool = False,
        hooks: Iterable[RunHook] = (),
        clock: Clock = SYSTEM_CLOCK,
        lease_duration: DurationLike | None = None,
        store_time: bool = True,
    ) -> None:
        self.settings = GuardSettings.build(
            name,
            namespace=namespace or default_namespace(),
            identity=resolve_identity(identity) if identity is not None else None,
            every=every,
            cron=cron,
            time_zone=time_zone,
            tick=tick,
            job=job,
            at_most_for=at_most_for,
            at_least_for=at_least_for,
            keep_alive=keep_alive,
            starting_deadline=starting_deadline,
            stagger=stagger,
            snap=snap,
            lease_duration=lease_duration,
        )
        self.kube = kube
        self.clock = clock
        self._server_time: ServerTime | None = None
        if store_time and isinstance(clock, SystemClock):
            # The API server's clock, as a Scheduler reads it (docs/design.md §5.17).
            self._server_time = ServerTime(wall=lambda: clock.now().timestamp())
            self.clock = OffsetClock(clock, self._server_time.offset)
        self.hooks = RunHooks(hooks)

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    @property
    def identity(self) -> str:
        """The holder this guard writes on its Lease and JobRuns."""
        return self.settings.identity

    def __repr__(self) -> str:
        s = self.settings
        return f"Guard({s.name!r}, namespace={s.namespace!r}, identity={s.identity!r})"

    def _run_hooks(self) -> RunHooks:
        return self.hooks

    # --- the engine ----------------------------------------------------------------------

    def _engine(self, runtime: GuardRuntime) -> Engine:
        engine = Engine(
            settings=self.settings,
            runtime=runtime,
            given_kube=self.kube,
            clock=self.clock,
            hooks=self.hooks,
        )
        if self._server_time is not None:
            self._server_time.install(engine.kube)  # the first client it is used with
        return engine

    def _fired(self, given: datetime | None) -> datetime | None:
        """The caller's fire time, read in the caller's thread (the `tick` callable may
        depend on it)."""
        return fire_time(given, self.settings.tick_source)

    async def _finish_on(
        self, runtime: GuardRuntime, run: GuardRun, error: BaseException | None
    ) -> None:
        if run.ran:
            await self._engine(runtime).finish(run, error=error)

    # --- sync --------------------------------------------------------------------------

    def _snap(self, snap: bool | None) -> bool:
        return self.settings.snap if snap is None else snap

    def claim_sync(self, *, tick: datetime | None = None, snap: bool | None = None) -> GuardRun:
        """Claim `tick` (default: the tick rule; `snap` None: the guard's) from sync code;
        blocks this thread only. A held run's body starts when this returns (its span starts
        under this thread's context, `started` is told) and it must be passed to
        `finish_sync` (the `claim()` context manager does both, and makes the span current)."""
        fired, now = self._fired(tick), self.clock.now()
        loop, runtime = background()
        engine = self._engine(runtime)
        run = loop.run(engine.claim(fired=fired, now=now, snap=self._snap(snap)))
        if engine.late(run):  # checked in this thread, where the body would start
            run = loop.run(engine.missed(run))
        if run:
            run.span = observe_start(self.hooks, run.event(), parent="caller", loop=loop.loop)
        return run

    def finish_sync(self, run: GuardRun, *, error: BaseException | None = None) -> None:
        """End a run from `claim_sync`: its outcome recorded, its grant released."""
        loop, runtime = background()
        loop.run(self._finish_on(runtime, run, error))

    # --- async -------------------------------------------------------------------------

    async def claim_async(
        self, *, tick: datetime | None = None, snap: bool | None = None
    ) -> GuardRun:
        """Claim `tick` on the running loop (its own runtime); pair with `finish_async`."""
        fired, now = self._fired(tick), self.clock.now()
        engine = self._engine(for_running_loop())
        run = await engine.claim(fired=fired, now=now, snap=self._snap(snap))
        if engine.late(run):
            run = await engine.missed(run)
        if run:
            run.span = observe_start(self.hooks, run.event(), parent="caller")
        return run

    async def finish_async(self, run: GuardRun, *, error: BaseException | None = None) -> None:
        await self._finish_on(for_running_loop(), run, error)

    # --- forms -------------------------------------------------------------------------

    def claim(self, *, tick: datetime | None = None, snap: bool | None = None) -> Claim:
        """`with guard.claim() as run:` or `async with guard.claim(tick=t) as run:`; `snap`
        (None: the guard's `snap`) snaps the fire time onto the schedule."""
        return Claim(self, tick, snap)

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Awaitable[R]]
    ) -> Callable[P, Awaitable[GuardResult[R]]]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, GuardResult[R]]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Wrap `fn`: each call claims the tick, runs `fn` when held, returns a GuardResult.
        A coroutine function gives an async wrapper."""
        if inspect.iscoroutinefunction(fn):
            return self._wrap_async(fn)
        return self._wrap_sync(fn)

    def _wrap_sync(self, fn: Callable[P, R]) -> Callable[P, GuardResult[R]]:
        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> GuardResult[R]:
            with self.claim() as run:
                if not run:
                    return GuardResult.of(run)
                value = fn(*args, **kwargs)
            return GuardResult.of(run, value)

        guarded.guard = self  # type: ignore[attr-defined]
        return guarded

    def _wrap_async(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[GuardResult[R]]]:
        @functools.wraps(fn)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> GuardResult[R]:
            async with self.claim() as run:
                if not run:
                    return GuardResult.of(run)
                value = await fn(*args, **kwargs)
            return GuardResult.of(run, value)

        guarded.guard = self  # type: ignore[attr-defined]
        return guarded


class Claim:
    """The context manager of `Guard.claim()`: enters with the GuardRun (falsy when the tick
    was not claimed), which is also `current_run()` inside the block; on exit the outcome is
    recorded and the grant released. The run's span is the current span inside the block.
    The block's exception propagates."""

    def __init__(self, guard: Guard, tick: datetime | None, snap: bool | None) -> None:
        self._guard = guard
        self._tick = tick
        self._snap = snap
        self._run: GuardRun | None = None
        self._token: Any = None
        self._span = ExitStack()

    def _entered(self, run: GuardRun) -> GuardRun:
        self._run = run
        self._token = enter(run)
        self._span.enter_context(run.span.current())
        return run

    def _left(self) -> None:
        self._span.close()
        leave(self._token)

    def __enter__(self) -> GuardRun:
        return self._entered(self._guard.claim_sync(tick=self._tick, snap=self._snap))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._left()
        if self._run is not None and self._run.ran:
            self._guard.finish_sync(self._run, error=exc)

    async def __aenter__(self) -> GuardRun:
        return self._entered(await self._guard.claim_async(tick=self._tick, snap=self._snap))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._left()
        if self._run is not None and self._run.ran:
            await asyncio.shield(self._guard.finish_async(self._run, error=exc))


def guard(name: str, **options: Any) -> Guard:
    """`@guard("send-reminders", every="1m")`: `Guard(name, **options)` as a decorator; the
    wrapper returns a GuardResult (an async wrapper for a coroutine function)."""
    return Guard(name, **options)


__all__ = ["Claim", "Guard", "GuardConfigError", "GuardResult", "GuardRun", "guard"]
