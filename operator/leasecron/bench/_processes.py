"""Replica processes of a benchmark, seen from the parent: start, signal, read, stop.

Each replica is `python -m leasecron.bench._replica ...`, talking to the API server itself; it
writes one JSON object per line on stdout, which a reader thread turns into `Message`s in one
queue for the whole group, stamped with the parent's wall time. The parent writes JSON lines
to a replica's stdin (for example the shared start instant); a replica exits when its stdin
closes, so nothing outlives the parent. Logs (stderr) go to one file per replica.

It does not interpret messages beyond "event"; the benchmarks do.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

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


class ReplicaProcess:
    """One replica: its process, its stdin, and a thread feeding its stdout to `inbox`."""

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        log_path: Path,
        inbox: queue.Queue[Message],
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.expected_exit = False
        """Set when the benchmark ends this replica on purpose: its EOF is then no error."""
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", REPLICA_MODULE, *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        self._reader = threading.Thread(
            target=self._read, args=(inbox,), name=f"bench {name}", daemon=True
        )
        self._reader.start()

    def _read(self, inbox: queue.Queue[Message]) -> None:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                data = json.loads(raw)
            except ValueError:
                continue
            if isinstance(data, dict):
                inbox.put(Message(self.name, data, time.time()))
        inbox.put(Message(self.name, {"event": EOF_EVENT}, time.time()))

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, data: dict[str, Any]) -> None:
        """One JSON line to the replica's stdin."""
        stdin = self.process.stdin
        if stdin is None or stdin.closed:
            raise BenchError(f"{self.name}: stdin is closed")
        stdin.write(json.dumps(data).encode() + b"\n")
        stdin.flush()

    def signal(self, signum: signal.Signals) -> None:
        if self.alive():
            os.kill(self.pid, signum)

    def stop(self, *, grace: float = 5.0) -> None:
        """Close stdin (the replica's cue to exit), then SIGTERM, then SIGKILL."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        for signum in (None, signal.SIGTERM, signal.SIGKILL):
            if signum is not None:
                self.signal(signum)
            try:
                self.process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        self._reader.join(timeout=grace)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ReplicaGroup:
    """The replicas of one benchmark run; a context manager that stops them all on exit.
    Every message read is also kept, in order, in `history`."""

    def __init__(self, *, kubeconfig: str, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "PYTHONUNBUFFERED": "1"}
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
        for replica in self.replicas.values():
            replica.stop()

    def __enter__(self) -> ReplicaGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
