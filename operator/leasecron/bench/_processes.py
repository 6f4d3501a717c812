"""Replica processes of a benchmark, seen from the parent: start, signal, read, stop.

Each replica is `python -m leasecron.bench._replica ...`, talking to the API server itself; it
writes one JSON object per line on stdout, which a reader thread turns into `Message`s in one
queue for the whole group, stamped with the parent's wall time. The parent writes JSON lines
to a replica's stdin (for example the shared start instant); a replica exits when its stdin
closes. Starting, signalling and stopping are `leasecron.testing`'s `ChildProcess` (own
session, parent-death signal). Logs (stderr) go to one file per replica.

It does not interpret messages beyond "event"; the benchmarks do.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from leasecron.testing import ChildProcess, stop_children

REPLICA_MODULE = "leasecron.bench._replica"
EOF_EVENT = "eof"
FINAL_EVENTS = frozenset({"done", "exit"})
"""A replica that sent one of these has finished: its exit is expected."""


class BenchError(RuntimeError):
    """A benchmark could not complete: a replica died or an expected event did not come."""


@dataclass(frozen=True)
class Message:
    """One JSON line from replica `replica`, read at the parent's wall time `received`."""

    replica: str
    data: dict[str, Any] = field(repr=False)
    received: float

    @property
    def event(self) -> str:
        return str(self.data.get("event", ""))


class ReplicaProcess(ChildProcess):
    """One replica: a `ChildProcess` whose stdout lines go to its group's `inbox`."""

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        log_path: Path,
        inbox: queue.Queue[Message],
    ) -> None:
        self.expected_exit = False
        """Set when the benchmark ends this replica on purpose: its EOF is then no error."""
        super().__init__(
            name=name,
            argv=[sys.executable, "-m", REPLICA_MODULE, *argv],
            log_path=log_path,
            env=env,
            stdin=True,
            on_line=lambda data, received: inbox.put(Message(name, data, received)),
            on_eof=lambda: inbox.put(Message(name, {"event": EOF_EVENT}, time.time())),
        )


class ReplicaGroup:
    """The replicas of one benchmark run; a context manager that stops them all on exit.
    Every message read is also kept, in order, in `history`."""

    def __init__(self, *, kubeconfig: str, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {"KUBECONFIG": kubeconfig}
        """Set for every replica, over the parent's environment."""
        self.replicas: dict[str, ReplicaProcess] = {}
        self.history: list[Message] = []
        self._unclaimed: list[Message] = []
        self._inbox: queue.Queue[Message] = queue.Queue()

    def spawn(self, name: str, argv: Sequence[str]) -> ReplicaProcess:
        if name in self.replicas:
            raise ValueError(f"replica {name} exists already")
        replica = ReplicaProcess(
            name=name,
            argv=argv,
            env=self.env,
            log_path=self.workdir / f"{name}.log",
            inbox=self._inbox,
        )
        self.replicas[name] = replica
        return replica

    def poll(self, *, timeout: float) -> Message | None:
        """The next message read within `timeout` seconds (also kept in `history` and for
        `wait_for`), or None. BenchError when a replica ends that was not expected to."""
        try:
            message = self._inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        self.history.append(message)
        self._unclaimed.append(message)
        replica = self.replicas.get(message.replica)
        if replica is not None and message.event in FINAL_EVENTS:
            replica.expected_exit = True
        if message.event == EOF_EVENT and replica is not None and not replica.expected_exit:
            raise BenchError(f"{message.replica} exited unexpectedly:\n{replica.log_tail()}")
        return message

    def wait_for(
        self, predicate: Callable[[Message], bool], *, timeout: float, what: str
    ) -> Message:
        """The oldest message not yet returned that matches `predicate` (messages read while
        waiting for something else are kept for later calls); BenchError after `timeout`
        seconds, or when a replica ends that the benchmark did not end on purpose."""
        deadline = time.monotonic() + timeout
        while True:
            for index, message in enumerate(self._unclaimed):
                if predicate(message):
                    return self._unclaimed.pop(index)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
            try:
                self.poll(timeout=remaining)
            except BenchError as e:
                raise BenchError(f"while waiting for {what}: {e}") from e

    def stop(self) -> None:
        for replica in self.replicas.values():
            replica.expected_exit = True
        stop_children(self.replicas.values(), grace=5.0)

    def __enter__(self) -> ReplicaGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
