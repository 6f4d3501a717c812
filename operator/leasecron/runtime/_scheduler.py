"""`Scheduler`: the public face of the in-pod runtime. Handlers are registered by name; the
scheduler watches the ScheduledJobs of its group in its namespace and runs each tick per
bucket (docs/design.md §2, §5).

One async implementation (`_core.Runtime`) and thin shells over it, as APScheduler 4 does:
`await scheduler.run()` or `async with scheduler:` in asyncio apps; `scheduler.start()` (a
background thread with its own loop) and `scheduler.stop()` in sync apps; `run_forever()`
blocks the main thread with SIGTERM/SIGINT handlers installed. `stop()` is safe from any
thread and in any mode: it asks for a graceful stop (no new ticks; running handlers finish or
are stopped within `grace_period`; Leases released; the member Lease deleted) and, in thread
mode, waits for it. A Scheduler runs once at a time; it can be run again after it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import structlog

from leasecron import _logs
from leasecron.kube.clients import Kube
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.shards import DEFAULT_SHARDS, check_shards
from leasecron.runtime._core import Runtime, Settings
from leasecron.runtime._environment import check_group, default_namespace, resolve_identity
from leasecron.runtime._hooks import HookDecorators, RunHook, RunHooks
from leasecron.runtime._oneshot import RunResult, run_once
from leasecron.runtime._registry import Handler, HandlerRegistry
from leasecron.runtime._services import Tuning
from leasecron.runtime._tracing import caller_parent

F = TypeVar("F", bound=Handler)
_log = _logs.get_logger("leasecron.runtime")
_STOP_MARGIN = 15.0
"""Seconds beyond the grace period `stop()` waits for the scheduler thread to end."""
_HOOKS_DRAIN = 5.0
"""Seconds a stopping scheduler (or `run_once`) waits for its run hooks to be delivered."""


class Scheduler(HookDecorators):
    """Runs the registered handlers for the ScheduledJobs of `group` in `namespace`.

    `namespace` defaults to $POD_NAMESPACE, else the kubeconfig context's namespace, else
    "default". `kube` defaults to a client built from the environment (in-cluster or
    kubeconfig), closed when the scheduler stops. `identity` (the Lease holder) defaults to
    the pod or host name plus a random suffix; one you pass must be unique per process (two
    live processes with one identity take each other's grants for their own: a replica that
    sees it logs an error and counts `leasecron_identity_conflicts_total`). `grace_period`
    bounds how long running handlers get to finish at stop; keep it below the pod's
    terminationGracePeriodSeconds.
    `shards` is the shard count this replica proposes for its group when the group has no
    record yet (docs/design.md, "The group record"): once recorded, every replica follows
    the recorded count (one configured otherwise logs it); `leasecron shards` changes it.

    `hooks` are told of every run (`RunEvent`: started, succeeded, failed, skipped; see
    `leasecron.runtime._hooks` for how they run); the decorators `on_start`, `on_success`,
    `on_failure` and `on_skip` add one for one kind. With `opentelemetry-api` installed each
    run is a span `leasecron.run <job>` (a root span for ticks; a child of the caller's
    context for `run_once`).
    """

    def __init__(
        self,
        group: str = "default",
        *,
        namespace: str | None = None,
        kube: Kube | None = None,
        identity: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        grace_period: float = 25.0,
        max_threads: int = 64,
        tuning: Tuning | None = None,
        shards: int = DEFAULT_SHARDS,
        hooks: Iterable[RunHook] = (),
    ) -> None:
        if grace_period < 0:
            raise ValueError(f"grace_period ({grace_period}) must not be negative")
        if max_threads < 1:
            raise ValueError(f"max_threads ({max_threads}) must be at least 1")
        self._settings = Settings(
            group=check_group(group),
            namespace=namespace or default_namespace(),
            identity=resolve_identity(identity),
            clock=clock,
            grace_period=grace_period,
            max_threads=max_threads,
            tuning=tuning or Tuning(),
            shards=check_shards(shards),
            hooks=RunHooks(hooks),
        )
        self._kube = kube
        self._registry = HandlerRegistry()
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._stop_requested = False
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._runtime: Runtime | None = None

    def __repr__(self) -> str:
        s = self._settings
        return f"Scheduler(group={s.group!r}, namespace={s.namespace!r}, identity={s.identity!r})"

    # --- what it is ---------------------------------------------------------------------

    @property
    def group(self) -> str:
        return self._settings.group

    @property
    def namespace(self) -> str:
        return self._settings.namespace

    @property
    def identity(self) -> str:
        """This replica's identity: the holder it writes on Leases and JobRuns."""
        return self._settings.identity

    @property
    def kube(self) -> Kube | None:
        """The client given at construction (None: one is made from the environment)."""
        return self._kube

    @property
    def grace_period(self) -> float:
        return self._settings.grace_period

    @property
    def handlers(self) -> tuple[str, ...]:
        """The registered handler names, sorted."""
        return self._registry.names()

    @property
    def running(self) -> bool:
        return self._loop is not None

    @property
    def jobs(self) -> tuple[str, ...]:
        """Names of the ScheduledJobs this replica runs now (its group's valid jobs whose
        handler is registered; suspended single-owner jobs excepted), sorted."""
        table = self._runtime.table if self._runtime is not None else None
        return tuple(sorted(table.workers)) if table is not None else ()

    @property
    def ignored(self) -> dict[str, str]:
        """Jobs of this group this replica does not run, and why: an invalid spec (with the
        field-naming message) or a handler that is not registered here."""
        table = self._runtime.table if self._runtime is not None else None
        return dict(table.ignored) if table is not None else {}

    def handler(self, name: str) -> Handler | None:
        """The callable registered under `name`, or None."""
        entry = self._registry.get(name)
        return entry.fn if entry is not None else None

    # --- registration -------------------------------------------------------------------

    def register(self, name: str, fn: F) -> F:
        """Register `fn` as the handler `name` (what `spec.handler` names; by default the
        ScheduledJob's name). It takes one argument, the JobContext. Allowed while running."""
        self._registry.register(name, fn)
        return fn

    def job(self, name: str) -> Callable[[F], F]:
        """Decorator form of `register`: `@scheduler.job("nightly_report")`."""

        def decorate(fn: F) -> F:
            return self.register(name, fn)

        return decorate

    def _run_hooks(self) -> RunHooks:
        return self._settings.hooks

    # --- one run ------------------------------------------------------------------------

    async def run_once(
        self,
        job: str | Mapping[str, Any],
        *,
        tick: datetime | None = None,
        timeout: float = 60.0,  # noqa: ASYNC109 - bounds the whole run
    ) -> RunResult:
        """Run one tick of `job` now, as this replica would (claim, JobRun, handler, record,
        release), ignoring its starting deadline; for tests and manual triggers. `job` is a
        ScheduledJob name or a manifest (created when missing); `tick` defaults to the latest
        tick (now for single-owner jobs, which run one term until the handler returns or
        `timeout`). Not while this scheduler runs."""
        if self.running:
            raise RuntimeError(f"{self!r} is running; run_once needs a scheduler that is not")
        runtime = Runtime(self._settings, self._registry, self._kube)
        try:
            with caller_parent():
                return await run_once(runtime, job, tick=tick, timeout=timeout)
        finally:
            await self._settings.hooks.drain(timeout=_HOOKS_DRAIN)

    # --- asyncio ------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until `stop()` (or until cancelled, which stops gracefully first)."""
        with self._guard:
            if self._loop is not None:
                raise RuntimeError(f"{self!r} is already running")
            self._loop = asyncio.get_running_loop()
            self._stop_event = asyncio.Event()
            self._ready.clear()
            self._startup_error = None
            if self._stop_requested:  # stop() came before the loop was there
                self._stop_event.set()
        _logs.defer_to_logging()
        runtime = self._runtime = Runtime(self._settings, self._registry, self._kube)
        try:
            await runtime.serve(self._stop_event, self._on_ready)
        finally:
            await self._settings.hooks.drain(timeout=min(_HOOKS_DRAIN, self.grace_period))
            with self._guard:
                self._loop, self._stop_event = None, None
                self._stop_requested = False
            self._ready.set()

    async def __aenter__(self) -> Self:
        """Start in a task of the running loop; returns once it runs (or raises why not)."""
        task = self._task = asyncio.get_running_loop().create_task(self.run())
        while not self._ready.is_set() and not task.done():
            await asyncio.wait([task], timeout=0.05)
        if task.done():
            task.result()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        task, self._task = self._task, None
        if task is not None:
            await task

    # --- threads ------------------------------------------------------------------------

    def start(self, *, timeout: float = 60.0) -> None:
        """Run in a background thread with its own event loop. Returns once the scheduler
        runs, or after `timeout` seconds or a first failure to reach the API server (it keeps
        retrying in the background); raises when it cannot start at all."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"{self!r} is already started")
        self._ready.clear()
        self._startup_error = None
        with self._guard:
            self._stop_requested = False
        failure: list[BaseException] = []

        def target() -> None:
            try:
                asyncio.run(self.run())
            except BaseException as e:
                failure.append(e)
                _log.exception("scheduler failed", group=self.group, holder=self.identity)
            finally:
                self._ready.set()

        self._thread = threading.Thread(target=target, name="leasecron-scheduler", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        if failure:
            raise failure[0]

    def stop(self, *, timeout: float | None = None) -> None:
        """Stop gracefully. From another thread than the scheduler's own (thread mode), waits
        up to `timeout` (default grace period + 15 s) for it to end."""
        with self._guard:
            self._stop_requested = True
            loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: stopping anyway
                loop.call_soon_threadsafe(event.set)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.grace_period + _STOP_MARGIN if timeout is None else timeout)
            if not thread.is_alive():
                self._thread = None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the scheduler runs (or failed to start); False on timeout."""
        return self._ready.wait(timeout) and self._startup_error is None

    def run_forever(self) -> None:
        """Run in this (main) thread until SIGTERM or SIGINT, then stop gracefully.
        Configures structlog JSON logging unless the application configured structlog."""
        if not structlog.is_configured():
            _logs.configure()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            signals = (signal.SIGTERM, signal.SIGINT)
            for sig in signals:
                loop.add_signal_handler(sig, self._on_signal, sig)
            try:
                await self.run()
            finally:
                for sig in signals:
                    loop.remove_signal_handler(sig)

        asyncio.run(main())

    # --- internals ----------------------------------------------------------------------

    def _on_signal(self, sig: int) -> None:
        _log.info("signal received; stopping", signal=signal.Signals(sig).name)
        self.stop()

    def _on_ready(self, error: BaseException | None) -> None:
        self._startup_error = error
        self._ready.set()
