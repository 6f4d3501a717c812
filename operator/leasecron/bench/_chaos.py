"""`leasecron bench chaos`: the example app in N replicas on a local control plane with the
operator running, under a seeded stream of faults, with every handler side effect recorded by
a fenced ledger outside the replicas; then the figures (see `_chaos_figures`).

The jobs (group `chaos`): two once-per-tick jobs every 2 s (`send-invoices`,
`send-reminders`, one handler), the single-owner `queue-poller` and the every-replica
`refresh-cache`. The driver (`_chaos_faults`) runs for `minutes`; ticks due between the
replicas being ready and the driver's end are measured; afterwards the bench waits for the
operator to judge the last of them (and up to `_ALARM_WAIT` more for it to record any still
silent) before reading JobRuns and statuses.

Always starts its own control plane (it restarts kube-apiserver and etcd), Toxiproxy and
ledger; nothing outlives the run. Replica logs are kept in the printed work directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leasecron.bench._chaos_faults import KINDS, Driver, FaultRecord
from leasecron.bench._chaos_figures import (
    due_ticks,
    missed_by_operator,
    outcomes_by_tick,
    single_owner_figures,
    takeovers,
    tick_figures,
)
from leasecron.bench._chaos_fleet import Fleet
from leasecron.bench._chaos_ledger import LedgerServer
from leasecron.bench._chaos_report import render
from leasecron.bench._clusters import progress
from leasecron.bench._operator_process import OperatorSubprocess
from leasecron.bench._processes import BenchError
from leasecron.kube.clients import Kube, collection_path
from leasecron.kube.errors import KubeError
from leasecron.models.names import (
    API_VERSION,
    GROUP,
    JOBRUN_PLURAL,
    SCHEDULEDJOB_PLURAL,
    VERSION,
    job_lease_name,
)
from leasecron.testing import ControlPlane, Toxiproxy, apply_leasecron_crds

if TYPE_CHECKING:
    from leasecron.bench._chaos_store import PostgresEffects

CHAOS_GROUP = "chaos"
ONCE_PER_TICK = ("send-invoices", "send-reminders")
SINGLE_OWNER = "queue-poller"
EVERY_REPLICA = "refresh-cache"
TICK_SECONDS = 2.0
AT_MOST_FOR = 4.0
STARTING_DEADLINE = 4.0
LEASE_DURATION = 3.0
_READY_TIMEOUT = 180.0
_ALARM_WAIT = 60.0
_JUDGE_AFTER = STARTING_DEADLINE + 10.0
"""The operator judges tick T about T + startingDeadline + 1 s; this leaves it room."""


def job_manifests(namespace: str) -> list[dict[str, Any]]:
    """The soak's four ScheduledJobs."""
    once = {
        "bucket": "once-per-tick",
        "schedule": f"@every {TICK_SECONDS:g}s",
        "group": CHAOS_GROUP,
        "handler": "send-invoices",
        "lock": {"atMostFor": f"{AT_MOST_FOR:g}s", "atLeastFor": "0s", "keepAlive": True},
        "startingDeadline": f"{STARTING_DEADLINE:g}s",
        "catchUp": {"policy": "Latest"},
        "history": {"succeeded": 1000, "failed": 1000},
    }
    specs: dict[str, dict[str, Any]] = {name: once for name in ONCE_PER_TICK}
    specs[SINGLE_OWNER] = {
        "bucket": "single-owner",
        "group": CHAOS_GROUP,
        "election": {
            "leaseDuration": f"{LEASE_DURATION:g}s",
            "renewDeadline": "2s",
            "retryPeriod": "500ms",
        },
    }
    specs[EVERY_REPLICA] = {
        "bucket": "every-replica",
        "schedule": "@every 5s",
        "group": CHAOS_GROUP,
    }
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        for name, spec in specs.items()
    ]


@dataclass(frozen=True, kw_only=True)
class _Reader:
    """The bench's own reads, with the admin credentials straight to the API server."""

    kube: Kube
    namespace: str

    def holders(self) -> dict[str, str]:
        wanted = {job_lease_name(job): job for job in (*ONCE_PER_TICK, SINGLE_OWNER)}
        path = collection_path(
            group="coordination.k8s.io", version="v1", plural="leases", namespace=self.namespace
        )
        try:
            listing = self.kube.request_sync("GET", path, timeout=2.0)
        except KubeError:
            return {}
        found = {}
        for lease in listing.get("items") or []:
            job = wanted.get(str((lease.get("metadata") or {}).get("name")))
            if job is not None:
                found[job] = str((lease.get("spec") or {}).get("holderIdentity") or "")
        return found

    def items(self, plural: str) -> list[dict[str, Any]]:
        path = collection_path(
            group=GROUP, version=VERSION, plural=plural, namespace=self.namespace
        )
        items: list[dict[str, Any]] = self.kube.request_sync("GET", path).get("items") or []
        return items


class _OperatorSupervisor:
    """The operator as a Deployment keeps it: restarted whenever it exits (it exits on purpose
    when it loses its election Lease, to come back as a standby). Each restart is a timeline
    entry `operator_restart`."""

    def __init__(self, *, kubeconfig: Path, namespace: str, workdir: Path, driver: Driver) -> None:
        self._kubeconfig, self._namespace, self._workdir = kubeconfig, namespace, workdir
        self._driver = driver
        self._halt = threading.Event()
        self.current = self._spawn()
        self._thread = threading.Thread(target=self._watch, name="chaos-operator", daemon=True)
        self._thread.start()

    def _spawn(self) -> OperatorSubprocess:
        return OperatorSubprocess(
            kubeconfig=self._kubeconfig,
            log_path=self._workdir / "operator.log",
            namespaces=[self._namespace],
            election_namespace=self._namespace,
        )

    def _watch(self) -> None:
        while not self._halt.wait(0.5):
            code = self.current.exit_code()
            if code is not None and not self._halt.is_set():
                now = time.time()
                self._driver.timeline.append(
                    FaultRecord(
                        kind="operator_restart", start=now, end=now, detail={"exit_code": code}
                    )
                )
                progress(f"the operator exited ({code}); restarting it as a Deployment would")
                self.current = self._spawn()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=5.0)
        self.current.stop()


@contextlib.contextmanager
def _world(workdir: Path) -> Iterator[tuple[ControlPlane, Toxiproxy, LedgerServer]]:
    plane = ControlPlane(controller_manager=False, start_timeout=180.0)
    with contextlib.ExitStack() as stack:
        progress("starting a local control plane, Toxiproxy and the fenced ledger")
        stack.enter_context(plane)
        with plane.api_client() as api:
            apply_leasecron_crds(api)
        toxiproxy = stack.enter_context(Toxiproxy())
        store = _effects_store(stack)
        ledger = LedgerServer(log_path=workdir / "effects.jsonl", store=store).start()
        stack.callback(ledger.stop)
        yield plane, toxiproxy, ledger


def _effects_store(stack: contextlib.ExitStack) -> PostgresEffects | None:
    """A throwaway PostgreSQL for the effects (`_chaos_store`), or None (the fence in
    memory) where PostgreSQL or its Python packages are not installed."""
    try:
        from leasecron.bench._chaos_store import PostgresEffects
        from leasecron.testing._stores import StoreMissingError, postgres_server

        server = stack.enter_context(postgres_server())
    except (ImportError, StoreMissingError) as e:
        progress(f"effects fenced in memory, not in PostgreSQL: {e}")
        return None
    store = PostgresEffects(server.database("postgres").url).create()
    stack.callback(store.close)
    progress(f"effects fenced in PostgreSQL on {server.host}:{server.port}")
    return store


def run_chaos(
    *,
    minutes: float,
    seed: int | None,
    replicas: int,
    json_output: bool,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, Any]:
    """Run the soak; print the table (and the JSON last with `json_output`); the figures."""
    if minutes <= 0 or replicas < 2:
        raise ValueError(f"--minutes must be > 0 and --replicas >= 2, got {minutes}, {replicas}")
    if not kinds or set(kinds) - set(KINDS):
        raise ValueError(f"--faults must be among {','.join(KINDS)}, got {','.join(kinds)!r}")
    seed = seed if seed is not None else secrets.randbelow(2**31)
    progress(f"seed {seed}")
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="leasecron-chaos-"))
    progress(f"replica logs, fault files and the ledger's effects in {workdir}")
    with _world(workdir) as (plane, toxiproxy, ledger):
        kube = Kube.from_config(kubeconfig=str(plane.kubeconfig), max_workers=2)
        namespace = f"chaos-{secrets.token_hex(3)}"
        kube.request_sync("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        sj_path = collection_path(
            group=GROUP, version=VERSION, plural=SCHEDULEDJOB_PLURAL, namespace=namespace
        )
        for manifest in job_manifests(namespace):
            kube.request_sync("POST", sj_path, body=manifest)
        reader = _Reader(kube=kube, namespace=namespace)
        fleet = Fleet(
            plane=plane,
            toxiproxy=toxiproxy,
            namespace=namespace,
            group=CHAOS_GROUP,
            ledger_url=ledger.url,
            workdir=workdir,
            work_ms=300.0,
        )
        # Quiet time between faults: short runs pack them closer, so that the first round
        # (every kind once) fits.
        gap = (1.0, 3.0) if minutes <= 2 else (2.0, 6.0) if minutes <= 3 else (6.0, 16.0)
        grants = {job: AT_MOST_FOR for job in ONCE_PER_TICK} | {SINGLE_OWNER: LEASE_DURATION}
        driver = Driver(
            rng=rng,
            fleet=fleet,
            plane=plane,
            holders=reader.holders,
            grants=grants,
            single_owner=SINGLE_OWNER,
            gap=gap,
            kinds=kinds,
            say=progress,
        )
        operator = _OperatorSupervisor(
            kubeconfig=plane.kubeconfig, namespace=namespace, workdir=workdir, driver=driver
        )
        try:
            first_operator = operator.current
            first_operator.wait(first_operator.leading, timeout=_READY_TIMEOUT, what="leading")
            first = [driver.start_replica() for _ in range(replicas)]
            if not fleet.wait_ready(first, timeout=_READY_TIMEOUT):
                raise BenchError(f"replicas not ready after {_READY_TIMEOUT:g}s; logs in {workdir}")
            began = time.time() + TICK_SECONDS
            until = began + minutes * 60.0
            progress(f"{replicas} replicas ready; faults until +{minutes * 60:.0f}s")
            driver.run(until=until)
            time.sleep(max(0.0, until - time.time()))  # the measured window's end
            writes = fleet.writes()
            figures = _collect(
                reader=reader, ledger=ledger, driver=driver, window=(began, until), seed=seed
            )
            rss = [r.rss_bytes() for r in fleet.running()]
            figures["replica_rss_mb"] = {
                "max": round(max(rss, default=0) / 2**20, 1),
                "mean": round(sum(rss) / max(len(rss), 1) / 2**20, 1),
            }
            runs = figures["runs"] or 1
            figures["api_writes_per_run"] = round(sum(writes.values()) / runs, 2)
            figures["api_writes_by_resource"] = dict(writes)
            figures["every_replica_runs"] = fleet.runs.get(EVERY_REPLICA, 0)
            figures["replicas"], figures["replicas_started"] = replicas, len(fleet.all)
            figures["operator_restarts"] = sum(
                1 for record in driver.timeline if record.kind == "operator_restart"
            )
            figures["minutes"], figures["fault_kinds"] = minutes, list(kinds)
            figures["workdir"] = str(workdir)
        finally:
            driver.halt()
            fleet.stop_all()
            operator.stop()
            asyncio.run(kube.close())
    (workdir / "figures.json").write_text(json.dumps(figures, indent=1))
    print(render(figures), flush=True)
    if json_output:
        print(json.dumps(figures), flush=True)
    return figures


def _collect(
    *,
    reader: _Reader,
    ledger: LedgerServer,
    driver: Driver,
    window: tuple[float, float],
    seed: int,
) -> dict[str, Any]:
    """Wait for the operator to judge the window's ticks, then compute the figures; while any
    tick without an effect is silent, read again for up to `_ALARM_WAIT`."""
    began, until = window
    due = due_ticks(start=began, end=until, every=TICK_SECONDS)
    time.sleep(_JUDGE_AFTER)  # the operator's deadline for the last tick, plus its grace
    deadline = time.monotonic() + _ALARM_WAIT
    while True:
        effects = ledger.ledger.snapshot()
        try:
            jobruns, jobs = reader.items(JOBRUN_PLURAL), reader.items(SCHEDULEDJOB_PLURAL)
        except KubeError as e:
            if time.monotonic() > deadline:
                raise BenchError(f"cannot read JobRuns: {e}") from e
            time.sleep(2.0)
            continue
        figures = tick_figures(
            jobs=ONCE_PER_TICK,
            due=due,
            effects=effects,
            outcomes=outcomes_by_tick(jobruns),
            by_operator=missed_by_operator(jobruns),
        )
        if figures["never_run_silent"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(2.0)  # the operator records Missed runs on its own schedule
    missed_counts = {
        str(j["metadata"]["name"]): int((j.get("status") or {}).get("missedRuns") or 0)
        for j in jobs
    }
    store = ledger.ledger.store
    return {
        "seed": seed,
        "window": {"start": round(began, 3), "end": round(until, 3)},
        **figures,
        "duplicate_effects_in_store": store.duplicate_effects() if store is not None else None,
        "missed_runs_status": missed_counts,
        "single_owner": single_owner_figures(effects, job=SINGLE_OWNER),
        "takeover_s": takeovers(
            timeline=driver.timeline,
            effects=effects,
            once_per_tick=ONCE_PER_TICK,
            single_owner=SINGLE_OWNER,
        ),
        "timeline": [record.as_dict(origin=began) for record in driver.timeline],
    }
