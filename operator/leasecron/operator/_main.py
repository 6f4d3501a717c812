"""The operator process: health and metrics endpoints, the election among operator replicas,
and, in the one active replica only, the caches, the reconcile loop and kopf.

High availability: every replica runs leasecron's own `Elector` on the Lease
`--election-lease-name` (default `leasecron-operator`) in the election namespace. A standby
does nothing else: it writes nothing, runs no kopf and keeps no caches, and reports ready.
The replica that wins starts its caches, the reconcile loop and kopf.

Losing leadership (the Lease could not be renewed within renewDeadline, or another replica
holds it) stops all writing at once: every write goes through a fence that checks the term,
and the process then stops kopf and its loop and exits with `EXIT_LOST_LEADERSHIP`, so that
Kubernetes restarts it as a fresh standby. Restarting kopf in-process was the alternative;
exiting is what client-go controllers do and leaves no state of the old term behind.

SIGTERM/SIGINT: stop kopf and the loop, release the Lease (so the standby takes over at
once), exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from leasecron import _metrics as shared_metrics
from leasecron._logs import get_logger
from leasecron.coordination import Elector, Term
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer, backoff_delays
from leasecron.models.clocks import SYSTEM_CLOCK, Clock
from leasecron.models.configs import ElectionConfig
from leasecron.models.names import LABEL_COMPONENT
from leasecron.models.vocabulary import COMPONENT_OPERATOR
from leasecron.operator._floors import FINALIZE_LIMIT_S
from leasecron.operator._health import HealthServer
from leasecron.operator._kopf import run_kopf
from leasecron.operator._missed import DEFAULT_RECORD_GRACE
from leasecron.operator._reconciler import Reconciler

_log = get_logger("leasecron.operator")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_LOST_LEADERSHIP = 3
DEFAULT_LEASE = "leasecron-operator"
SHUTDOWN_S = 10.0


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    """Everything `leasecron operator` is started with. No namespaces: all of them."""

    identity: str
    namespaces: tuple[str, ...] = ()
    election: ElectionConfig = field(default_factory=ElectionConfig)
    election_namespace: str = "default"
    election_lease: str = DEFAULT_LEASE
    metrics_port: int = 9090
    health_port: int = 8080
    bind_address: str = "0.0.0.0"
    interval: float = 1.0
    kubeconfig: str | None = None
    run_record_grace: timedelta = DEFAULT_RECORD_GRACE
    """How long a claimed tick may wait past its startingDeadline for its JobRun."""
    floor_record_limit: timedelta = timedelta(seconds=FINALIZE_LIMIT_S)
    """How long a deletion waits for its job's last token to be recorded as a floor."""


async def _first(*awaitables: Awaitable[Any]) -> None:
    """Wait until the first of `awaitables` completes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class OperatorProcess:
    """One `leasecron operator` process; `run()` returns its exit code."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        prepare_kube: Callable[[Kube], object] | None = None,
    ) -> None:
        """`prepare_kube` is called with the process's Kube before its first request (the CLI
        installs a test's fault plan with it)."""
        self.config = config
        self._clock = clock
        self._prepare_kube = prepare_kube
        self._stop = asyncio.Event()
        self._lost = asyncio.Event()
        self._kopf_ready = asyncio.Event()
        self._elector: Elector | None = None
        self._elector_task: asyncio.Task[None] | None = None
        self._reconciler: Reconciler | None = None
        self._term: Term | None = None
        self._fenced = False

    # --- probes -------------------------------------------------------------------------

    def _alive(self) -> tuple[bool, str]:
        elector, task = self._elector, self._elector_task
        if elector is None or task is None:
            return True, "starting"
        if task.done() and not self._stop.is_set():
            return False, "the election loop ended"
        return True, "leading" if elector.is_leader else "standing by"

    def _ready(self) -> tuple[bool, str]:
        if self._elector is None:
            return False, "starting"
        if not self._elector.is_leader:
            return True, f"standby (leader: {self._elector.leader or 'none'})"
        reconciler = self._reconciler
        if reconciler is None or not self._kopf_ready.is_set():
            return False, "leader, starting its caches and kopf"
        if not reconciler.world.healthy:
            return False, "leader, reconnecting its watches"
        return True, "leader, watching"

    def may_write(self) -> bool:
        """The write fence: only while this process leads its current term."""
        term = self._term
        return (
            not self._fenced
            and term is not None
            and not term.lost.is_set()
            and self._elector is not None
            and self._elector.is_leader
        )

    # --- lifecycle ----------------------------------------------------------------------

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._stop.set)

    async def run(self) -> int:
        """Run until stopped (0), leadership is lost (3) or something fails (1)."""
        config = self.config
        self._install_signals()
        kube = Kube.from_config(kubeconfig=config.kubeconfig)
        if self._prepare_kube is not None:
            self._prepare_kube(kube)
        health = HealthServer(
            host=config.bind_address, port=config.health_port, alive=self._alive, ready=self._ready
        )
        await health.start()
        shared_metrics.serve(config.metrics_port, addr=config.bind_address)
        shared_metrics.LEADER.labels(
            lease_namespace=config.election_namespace, lease=config.election_lease
        ).set(0)
        informer = Informer(
            kube,
            path=LeaseStore(kube).collection_path(namespace=config.election_namespace),
            field_selector=f"metadata.name={config.election_lease}",
            clock=self._clock,
        )
        try:
            await informer.start()
            return await self._elect(kube, informer)
        finally:
            await informer.stop()
            await health.stop()
            await kube.close()

    async def _elect(self, kube: Kube, informer: Informer) -> int:
        config = self.config
        elector = Elector(
            kube,
            informer,
            namespace=config.election_namespace,
            name=config.election_lease,
            config=config.election,
            identity=config.identity,
            clock=self._clock,
            on_stopped_leading=lambda _term: self._lost.set(),
            labels={LABEL_COMPONENT: COMPONENT_OPERATOR},
        )
        self._elector = elector
        self._elector_task = elector.start()
        _log.info(
            "standing by for the operator lease",
            identity=config.identity,
            lease=config.election_lease,
            namespace=config.election_namespace,
        )
        leading = asyncio.ensure_future(elector.wait_leading())
        await _first(leading, self._stop.wait())
        if self._stop.is_set() or leading.cancelled() or leading.result() is None:
            await elector.stop(release=True)
            return EXIT_OK
        self._term = leading.result()
        code = await self._lead(kube)
        await elector.stop(release=code != EXIT_LOST_LEADERSHIP)
        return code

    async def _start_caches(self, reconciler: Reconciler) -> bool:
        """Start the Lease and JobRun caches, retrying with backoff while the API server
        refuses; False when stopped or deposed first."""
        for delay in backoff_delays(first=0.2, cap=5.0):
            try:
                await reconciler.world.start()
                return True
            except KubeError as e:
                _log.warning("could not start the caches", error=repr(e), retry_in=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(self._stop.wait(), self._lost.wait()), delay)
            if self._stop.is_set() or self._lost.is_set():
                return False
        return False

    async def _lead(self, kube: Kube) -> int:
        config = self.config
        _log.info("active operator", identity=config.identity, namespaces=list(config.namespaces))
        reconciler = Reconciler(
            kube,
            namespaces=config.namespaces,
            clock=self._clock,
            identity=config.identity,
            may_write=self.may_write,
            interval=config.interval,
            record_grace=config.run_record_grace,
            finalize_limit_s=config.floor_record_limit.total_seconds(),
        )
        self._reconciler = reconciler
        if not await self._start_caches(reconciler):
            return EXIT_OK if self._stop.is_set() else EXIT_LOST_LEADERSHIP
        loop_task = asyncio.create_task(reconciler.run(), name="leasecron reconcile loop")
        kopf_stop = asyncio.Event()
        kopf_task = asyncio.create_task(
            run_kopf(
                on_job_event=reconciler.job_event,
                namespaces=config.namespaces,
                stop_flag=kopf_stop,
                ready_flag=self._kopf_ready,
                after_spawn=self._install_signals,
            ),
            name="leasecron kopf",
        )
        await _first(
            self._stop.wait(),
            self._lost.wait(),
            asyncio.shield(kopf_task),
            asyncio.shield(loop_task),
        )
        self._fenced = True  # nothing is written from here on
        ended = [task.get_name() for task in (kopf_task, loop_task) if task.done()]
        kopf_stop.set()
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
            await asyncio.wait_for(
                asyncio.gather(kopf_task, loop_task, return_exceptions=True), SHUTDOWN_S
            )
        await reconciler.floors.stop()
        await reconciler.world.stop()
        if self._stop.is_set():
            _log.info("stopping on signal", identity=config.identity)
            return EXIT_OK
        if self._lost.is_set():
            _log.error(
                "lost the operator lease; exiting so that this replica restarts as a standby",
                identity=config.identity,
            )
            return EXIT_LOST_LEADERSHIP
        for task in (kopf_task, loop_task):
            failure = None if task.cancelled() else task.exception()
            if failure is not None:
                _log.error(
                    "ended unexpectedly",
                    task=task.get_name(),
                    identity=config.identity,
                    exc_info=failure,
                )
        _log.error("ended unexpectedly", tasks=ended, identity=config.identity)
        return EXIT_FAILED
