"""A replica process for the e2e tests: started with the test cluster's kubeconfig, its JSON
event lines on stdout collected in `lines`, so a test can wait on what it reports instead of
sleeping. Starting, signalling and stopping are `leasecron.testing`'s `ChildProcess`."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from leasecron.testing import ChildProcess


class ReplicaProcess(ChildProcess):
    """`python SCRIPT ARGS...` with its stdout JSON lines gathered in `lines`."""

    def __init__(
        self,
        script: Path,
        args: Sequence[str],
        *,
        name: str,
        kubeconfig: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        changed: threading.Condition | None = None,
    ) -> None:
        """`changed`: a condition shared by a group of replicas, to wait on all of them at
        once with `wait_group` (each replica gets its own otherwise)."""
        self.lines: list[dict[str, Any]] = []
        self._changed = changed if changed is not None else threading.Condition()
        super().__init__(
            name=name,
            argv=[sys.executable, str(script), *args],
            log_path=log_path,
            env={"KUBECONFIG": str(kubeconfig), **(env or {})},
            stdin=stdin,
            on_line=self._append,
            on_eof=self._notify,
        )

    def _append(self, event: dict[str, Any], _received: float) -> None:
        with self._changed:
            self.lines.append(event)
            self._changed.notify_all()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def events(self, kind: str) -> list[dict[str, Any]]:
        with self._changed:
            return [line for line in self.lines if line.get("event") == kind]

    def wait_until(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float) -> None:
        """Wait until `predicate(lines)` holds; fails when the time is up or the replica is gone."""
        wait_group([self], lambda: predicate(self.lines), timeout, f"{self.name} ({self.lines})")

    def gone(self) -> bool:
        return not self.alive() and self.reader_done()


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
            gone = [r for r in group if r.gone()]
            if remaining <= 0 or gone:
                tails = "".join(f"\n{r.name} log:\n{r.log_tail()}" for r in gone)
                raise AssertionError(f"{what}: not within {timeout}s{tails}")
            changed.wait(remaining)
