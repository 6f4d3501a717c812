"""Replicas of the example app as local processes, and the events they print.

Each replica is `python -m leasecron.demo.example_app` with `POD_NAME` (replica-1, replica-2,
...; a replacement gets the next number, as a new pod would), `POD_NAMESPACE` and `KUBECONFIG`
set, its stdout read line by line into one queue of `Event`s and its stderr (the structlog
JSON) kept in `<workdir>/<pod>.log`. The processes are `leasecron.testing`'s `ChildProcess`:
own sessions, so a Ctrl-C at the terminal reaches only the driver, which then stops them; with
`setpriv` available the kernel also kills them if the driver dies.

Owns naming, starting and stopping the replicas and turning their lines into `Event`s. Does not
interpret the events.
"""

from __future__ import annotations

import json
import queue
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecron.testing import ChildProcess, stop_children

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
    return event_of(pod=pod, data=data, received=received) if isinstance(data, dict) else None


def event_of(*, pod: str, data: dict[str, Any], received: float) -> Event | None:
    """The Event of one JSON object from a replica, None when it is not one of ours."""
    if not isinstance(data.get("event"), str):
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


class Replica(ChildProcess):
    """One running example-app process, named by its pod."""

    def __init__(
        self,
        *,
        pod: str,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        events: queue.Queue[Event],
    ) -> None:
        self.identity = ""
        """Filled in from its `ready` event."""
        super().__init__(
            name=pod,
            argv=argv,
            log_path=log_path,
            env=env,
            on_line=lambda data, received: self._put(events, data, received),
        )

    @property
    def pod(self) -> str:
        return self.name

    def _put(self, events: queue.Queue[Event], data: dict[str, Any], received: float) -> None:
        event = event_of(pod=self.name, data=data, received=received)
        if event is not None:
            events.put(event)


class Replicas:
    """The demo's replica processes and the queue their events arrive on."""

    def __init__(
        self, *, group: str, namespace: str, ledger: Path | str, kubeconfig: Path, workdir: Path
    ) -> None:
        self._group = group
        self._namespace = namespace
        self._ledger = ledger
        self._kubeconfig = kubeconfig
        self._workdir = workdir
        self.events: queue.Queue[Event] = queue.Queue()
        self.all: list[Replica] = []

    def start(self) -> Replica:
        """Start the next replica (`replica-<n>`); its events arrive on `events`."""
        pod = f"replica-{len(self.all) + 1}"
        replica = Replica(
            pod=pod,
            argv=[
                sys.executable,
                "-m",
                _APP,
                "--group",
                self._group,
                "--ledger",
                str(self._ledger),
            ],
            env={
                "POD_NAME": pod,
                "POD_NAMESPACE": self._namespace,
                "KUBECONFIG": str(self._kubeconfig),
            },
            log_path=self._workdir / f"{pod}.log",
            events=self.events,
        )
        self.all.append(replica)
        return replica

    def wait_readers(self, *, timeout: float) -> None:
        """Wait (bounded) until every stopped replica's stdout has been read to its end."""
        deadline = time.monotonic() + timeout
        for replica in self.all:
            replica.join_reader(timeout=deadline - time.monotonic())

    def running(self) -> list[Replica]:
        return [r for r in self.all if r.alive()]

    def by_identity(self, identity: str) -> Replica | None:
        return next((r for r in self.all if r.identity == identity), None)

    def by_pod(self, pod: str) -> Replica | None:
        return next((r for r in self.all if r.pod == pod), None)

    def kill(self, replica: Replica) -> float:
        """SIGKILL one replica (no cleanup, no release); the wall time of the kill."""
        killed_at = time.time()
        replica.kill()
        return killed_at

    def stop_all(self, *, grace_seconds: float) -> None:
        """SIGTERM every replica at once (they hand over and exit), SIGKILL what is left after
        `grace_seconds`. Idempotent."""
        stop_children(self.all, grace=grace_seconds)
