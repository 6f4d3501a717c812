"""The chaos soak's replicas: example-app processes, each behind its own Toxiproxy proxy and
with its own request-level fault file, started, killed, stopped and resumed by the driver.

A replica is `python -m leasecron.demo._chaos_replica` (spawned by module name: the bench does
not import the demo) with `KUBECONFIG` pointing at its proxy, `LEASECRON_FAULTS` at its fault
file and a wall-clock skew. Its stdout JSON lines give its identity (`ready`), its API request
counts (`stats`) and its runs; its stderr goes to `<workdir>/<pod>.log`. Pods are numbered as
a Deployment would name new pods (replica-1, replica-2, ...; a replacement gets a new number).

Owns the processes, their proxies and fault files. Does not decide which fault to inject.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecron.testing import (
    ChildProcess,
    ControlPlane,
    FaultPlan,
    Proxy,
    Toxiproxy,
    kubeconfig_via,
    stop_children,
)
from leasecron.testing.faults import ENV_VAR, Fault

REPLICA_MODULE = "leasecron.demo._chaos_replica"


@dataclass(kw_only=True)
class ChaosReplica:
    """One replica process and what the driver knows of it."""

    pod: str
    skew: float
    process: ChildProcess
    proxy: Proxy
    faults: Path
    log_path: Path
    started_at: float
    identity: str = ""
    requests: dict[str, int] = field(default_factory=dict)
    """Its API requests (`verb resource` -> count) as of its last `stats` line."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.alive()

    def signal(self, signum: signal.Signals) -> None:
        self.process.signal(signum)

    def rss_bytes(self) -> int:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def set_faults(self, faults: list[Fault]) -> None:
        FaultPlan().write(self.faults, faults=faults)


class Fleet:
    """The replicas of one soak (all of them, dead ones too)."""

    def __init__(
        self,
        *,
        plane: ControlPlane,
        toxiproxy: Toxiproxy,
        namespace: str,
        group: str,
        ledger_url: str,
        workdir: Path,
        work_ms: float,
    ) -> None:
        self._plane = plane
        self._toxiproxy = toxiproxy
        self._namespace = namespace
        self._group = group
        self._ledger_url = ledger_url
        self._workdir = workdir
        self._work_ms = work_ms
        self._lock = threading.Lock()
        self.all: list[ChaosReplica] = []
        self.runs: Counter[str] = Counter()
        """Run events by job, as the replicas printed them."""

    def start(self, *, skew: float) -> ChaosReplica:
        """Start the next replica with its wall clock `skew` seconds off."""
        pod = f"replica-{len(self.all) + 1}"
        proxy = self._toxiproxy.proxy(pod, self._plane.apiserver_port)
        kubeconfig = kubeconfig_via(self._plane, proxy, self._workdir / f"{pod}.kubeconfig")
        faults = self._workdir / f"{pod}.faults.json"
        FaultPlan().write(faults, faults=[])
        env = {
            "POD_NAME": pod,
            "POD_NAMESPACE": self._namespace,
            "KUBECONFIG": str(kubeconfig),
            ENV_VAR: str(faults),
        }
        argv = [
            sys.executable,
            "-m",
            REPLICA_MODULE,
            "--group",
            self._group,
            "--ledger-url",
            self._ledger_url,
            "--skew",
            f"{skew:.3f}",
            "--work-ms",
            f"{self._work_ms:g}",
        ]
        made: list[ChaosReplica] = []
        ready = threading.Event()  # its first lines may come before the replica is made

        def on_line(data: dict[str, Any], _at: float) -> None:
            ready.wait()
            self._on_line(made[0], data)

        log_path = self._workdir / f"{pod}.log"
        process = ChildProcess(name=pod, argv=argv, log_path=log_path, env=env, on_line=on_line)
        replica = ChaosReplica(
            pod=pod,
            skew=skew,
            process=process,
            proxy=proxy,
            faults=faults,
            log_path=log_path,
            started_at=time.time(),
        )
        with self._lock:
            self.all.append(replica)
        made.append(replica)
        ready.set()
        return replica

    def _on_line(self, replica: ChaosReplica, data: dict[str, Any]) -> None:
        event = data.get("event")
        if event == "ready":
            replica.identity = str(data.get("replica", ""))
        elif event == "stats" and isinstance(data.get("requests"), dict):
            replica.requests = {str(k): int(v) for k, v in data["requests"].items()}
        elif event == "run":
            with self._lock:
                self.runs[str(data.get("job", ""))] += 1

    def running(self) -> list[ChaosReplica]:
        with self._lock:
            return [r for r in self.all if r.alive()]

    def by_identity(self, identity: str) -> ChaosReplica | None:
        with self._lock:
            return next((r for r in self.all if r.identity and r.identity == identity), None)

    def wait_ready(self, replicas: list[ChaosReplica], *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while any(not r.identity for r in replicas):
            if time.monotonic() > deadline or any(not r.alive() for r in replicas):
                return False
            time.sleep(0.1)  # another process's readiness: polled from its stdout
        return True

    def kill(self, replica: ChaosReplica) -> None:
        replica.process.kill()  # SIGCONT first: a stopped one cannot die otherwise

    def stop_all(self, *, grace: float = 15.0) -> None:
        """SIGCONT and SIGTERM every replica (they release and exit), SIGKILL the rest."""
        with self._lock:
            replicas = list(self.all)
        stop_children([r.process for r in replicas], grace=grace)

    def writes(self) -> Counter[str]:
        """API writes of all replicas by resource, as of their last stats lines."""
        total: Counter[str] = Counter()
        with self._lock:
            replicas = list(self.all)
        for replica in replicas:
            for key, count in replica.requests.items():
                verb, _, resource = key.partition(" ")
                if verb in _WRITE_VERBS:
                    total[resource] += count
        return total


_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
