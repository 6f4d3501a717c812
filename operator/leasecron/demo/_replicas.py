"""Replicas of the example app as local processes, and the events they print.

Each replica is `python -m leasecron.demo.example_app` with `POD_NAME` (replica-1, replica-2,
...; a replacement gets the next number, as a new pod would), `POD_NAMESPACE` and `KUBECONFIG`
set, its stdout read line by line into one queue of `Event`s and its stderr (the structlog
JSON) kept in `<workdir>/<pod>.log`. Replicas run in their own sessions, so a Ctrl-C at the
terminal reaches only the driver, which then stops them; with `setpriv` available the kernel
also kills them if the driver dies.

Owns starting, killing and stopping those processes. Does not interpret the events.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

_APP = "leasecron.demo.example_app"


@dataclass(frozen=True, kw_only=True)
class Event:
    """One JSON line from a replica's stdout. `kind` is ready, run or stopped; `ts` is the
    replica's wall clock when it happened, `received` the driver's when it read it."""

    pod: str
    kind: str
    replica: str
    ts: float
    received: float
    job: str = ""
    tick: str = ""
    token: int | None = None
    outcome: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def parse_event(*, pod: str, line: str, received: float) -> Event | None:
    """The Event of one stdout line, None for anything that is not one of ours."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        return None
    token = data.get("token")
    known = {"event", "replica", "ts", "job", "tick", "token", "outcome"}
    return Event(
        pod=pod,
        kind=data["event"],
        replica=str(data.get("replica", "")),
        ts=float(data.get("ts", received)),
        received=received,
        job=str(data.get("job", "")),
        tick=str(data.get("tick", "")),
        token=token if isinstance(token, int) else None,
        outcome=str(data.get("outcome", "")),
        extra={k: v for k, v in data.items() if k not in known},
    )


class Replica:
    """One running example-app process."""

    def __init__(self, *, pod: str, popen: subprocess.Popen[str], log_path: Path) -> None:
        self.pod = pod
        self.popen = popen
        self.log_path = log_path
        self.identity = ""
        """Filled in from its `ready` event."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, *, lines: int = 10) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Replicas:
    """The demo's replica processes and the queue their events arrive on."""

    def __init__(
        self, *, group: str, namespace: str, ledger: Path, kubeconfig: Path, workdir: Path
    ) -> None:
        self._group = group
        self._namespace = namespace
        self._ledger = ledger
        self._kubeconfig = kubeconfig
        self._workdir = workdir
        self.events: queue.Queue[Event] = queue.Queue()
        self.all: list[Replica] = []
        self._readers: list[threading.Thread] = []

    def start(self) -> Replica:
        """Start the next replica (`replica-<n>`); its events arrive on `events`."""
        pod = f"replica-{len(self.all) + 1}"
        env = dict(os.environ)
        env.update(
            POD_NAME=pod,
            POD_NAMESPACE=self._namespace,
            KUBECONFIG=str(self._kubeconfig),
            PYTHONUNBUFFERED="1",
        )
        argv = [sys.executable, "-m", _APP, "--group", self._group, "--ledger", str(self._ledger)]
        log_path = self._workdir / f"{pod}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                [*_pdeathsig_prefix(), *argv],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
                start_new_session=True,
            )
        replica = Replica(pod=pod, popen=popen, log_path=log_path)
        self.all.append(replica)
        assert popen.stdout is not None
        reader = threading.Thread(
            target=self._read, args=(pod, popen.stdout), name=f"demo-{pod}", daemon=True
        )
        reader.start()
        self._readers.append(reader)
        return replica

    def _read(self, pod: str, stream: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):  # closed under us at shutdown
            for line in stream:
                event = parse_event(pod=pod, line=line, received=time.time())
                if event is not None:
                    self.events.put(event)

    def wait_readers(self, *, timeout: float) -> None:
        """Wait (bounded) until every stopped replica's stdout has been read to its end."""
        deadline = time.monotonic() + timeout
        for reader in self._readers:
            reader.join(max(0.0, deadline - time.monotonic()))

    def running(self) -> list[Replica]:
        return [r for r in self.all if r.alive()]

    def by_identity(self, identity: str) -> Replica | None:
        return next((r for r in self.all if r.identity == identity), None)

    def by_pod(self, pod: str) -> Replica | None:
        return next((r for r in self.all if r.pod == pod), None)

    def kill(self, replica: Replica) -> float:
        """SIGKILL one replica (no cleanup, no release); the wall time of the kill."""
        killed_at = time.time()
        if replica.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(replica.pid, signal.SIGKILL)
        replica.popen.wait()
        return killed_at

    def stop_all(self, *, grace_seconds: float) -> None:
        """SIGTERM every replica at once (they hand over and exit), SIGKILL what is left after
        `grace_seconds`. Idempotent."""
        for replica in self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(replica.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for replica in self.all:
            try:
                replica.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(replica.pid, signal.SIGKILL)
                replica.popen.wait()


def _pdeathsig_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --` when usable from this thread (see the module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
