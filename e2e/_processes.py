"""A replica process for the e2e tests: started with the test cluster's kubeconfig, its JSON
event lines on stdout collected by a reader thread, so a test can wait on what it reports
instead of sleeping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any


class ReplicaProcess:
    """`python SCRIPT ARGS...` with its stdout JSON lines gathered in `lines`."""

    def __init__(
        self,
        script: Path,
        args: Sequence[str],
        *,
        kubeconfig: Path,
        log: IO[str],
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        changed: threading.Condition | None = None,
    ) -> None:
        """`changed`: a condition shared by a group of replicas, to wait on all of them at
        once with `wait_group` (each replica gets its own otherwise)."""
        environment = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.process = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdin=subprocess.PIPE if stdin else None,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=environment,
        )
        self.lines: list[dict[str, Any]] = []
        self._changed = changed if changed is not None else threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # not one of the replica's events
            with self._changed:
                self.lines.append(event)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def events(self, kind: str) -> list[dict[str, Any]]:
        with self._changed:
            return [line for line in self.lines if line["event"] == kind]

    def wait_until(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float) -> None:
        """Wait until `predicate(lines)` holds; fails when the time is up or the replica is gone."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.lines):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.gone():
                    raise AssertionError(f"replica never got there in {timeout}s: {self.lines}")
                self._changed.wait(remaining)

    def gone(self) -> bool:
        return self.process.poll() is not None and not self._reader.is_alive()

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    def kill(self) -> None:
        """SIGCONT (a stopped process cannot die otherwise) and SIGKILL; close the pipes."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def wait_group(
    group: Sequence[ReplicaProcess], predicate: Callable[[], bool], timeout: float, what: str
) -> None:
    """Wait until `predicate()` (over the lines of all of `group`) holds; the replicas must
    share one `changed` condition. Fails when the time is up or a replica is gone."""
    changed = group[0]._changed
    assert all(r._changed is changed for r in group), "the replicas share no condition"
    deadline = time.monotonic() + timeout
    with changed:
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or any(r.gone() for r in group):
                raise AssertionError(f"{what}: not within {timeout}s")
            changed.wait(remaining)
