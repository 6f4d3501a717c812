"""One child process that speaks JSON lines: what the e2e tests, the benchmarks and the demo
start their replicas with.

A `ChildProcess` runs `argv` in its own session (so a Ctrl-C at the terminal reaches only the
parent, and a signal reaches the child's whole process group) with the parent's environment
plus `env` and `PYTHONUNBUFFERED=1`. Its stderr is appended to `log_path`. With `on_line`, a
reader thread parses each stdout line as JSON and hands every object to `on_line(data,
received)`, `received` being the parent's wall time when it read the line; lines that are not
a JSON object (a traceback, a stray print) are skipped, and `on_eof()` runs once stdout ends.
Without `on_line`, stdout goes to the log too. With `stdin=True` the parent can `send` lines.

It does not outlive its parent: started from the main thread it gets a parent-death SIGKILL
(`setpriv --pdeathsig`, the kernel ties it to the starting thread; armed once setpriv runs, so
a parent SIGKILLed within the child's first milliseconds can still leave it behind), and the
process-wide reaper of `leasecron.testing._processes` kills whatever is left at exit or on
SIGTERM/SIGHUP.

Owns starting, signalling, stopping with a grace period (`stop_children` stops many at once;
`terminate` stops a bare `Popen`, `kill_until_gone` the pids a callable finds each round) and
the log tail. Does not interpret the lines, and does not promise that `on_line` sees a
line before the process is reaped (join the reader with `join_reader`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

OnLine = Callable[[dict[str, Any], float], None]
"""Called from the reader thread with one JSON object and the parent's wall time."""


def pdeathsig_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --` when usable: the kernel kills the child if we die.

    The signal fires when the *thread* that started the child ends, so only the main thread
    asks for it. setpriv execs the program, so the pid stays the child's own."""
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def signal_group(pgid: int, signum: int) -> None:
    """`signum` to process group `pgid`; nothing when the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def kill_until_gone(
    find_pids: Callable[[], Iterable[int]], *, attempts: int, interval: float = 0.05
) -> None:
    """SIGKILL every pid `find_pids()` names, `interval` seconds apart, until it names none
    (at most `attempts` rounds: a process that forks while dying is caught by the next)."""
    for _ in range(attempts):
        pids = list(find_pids())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(interval)


def terminate(popen: subprocess.Popen[Any], *, grace: float) -> None:
    """SIGTERM `popen` while it runs, give it `grace` seconds to exit, then SIGKILL; reap it."""
    if popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(grace)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def log_tail(path: Path, *, lines: int) -> str:
    """The last `lines` lines of the file at `path` ("" when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ChildProcess:
    """One child process in its own session; see the module docstring."""

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        stdin: bool = False,
        on_line: OnLine | None = None,
        on_eof: Callable[[], None] | None = None,
    ) -> None:
        from leasecron.testing._processes import REAPER  # the reaper imports nothing of ours

        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                [*pdeathsig_prefix(), *argv],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if on_line is not None else log,
                stderr=log,
                env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
                text=True,
                start_new_session=True,
            )
        self._reaper_token = REAPER.register(self.kill)
        self._reader: threading.Thread | None = None
        if on_line is not None:
            self._reader = threading.Thread(
                target=self._read, args=(on_line, on_eof), name=f"child {name}", daemon=True
            )
            self._reader.start()

    def _read(self, on_line: OnLine, on_eof: Callable[[], None] | None) -> None:
        stream: IO[str] | None = self.popen.stdout
        assert stream is not None
        with contextlib.suppress(ValueError, OSError):  # closed under us at shutdown
            for line in stream:
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict):
                    on_line(data, time.time())
        if on_eof is not None:
            on_eof()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """None while it runs; negative N when killed by signal N."""
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def reader_done(self) -> bool:
        """True once stdout has been read to its end (always, without a reader)."""
        return self._reader is None or not self._reader.is_alive()

    def join_reader(self, *, timeout: float) -> bool:
        """Wait up to `timeout` seconds for stdout to be read to its end; whether it was."""
        if self._reader is not None:
            self._reader.join(max(0.0, timeout))
        return self.reader_done()

    def send(self, line: str | Mapping[str, Any]) -> None:
        """One line to the child's stdin: text as it is, a mapping as JSON."""
        stdin = self.popen.stdin
        if stdin is None or stdin.closed:
            raise RuntimeError(f"{self.name}: stdin is closed")
        stdin.write((line if isinstance(line, str) else json.dumps(dict(line))) + "\n")
        stdin.flush()

    def signal(self, signum: int) -> None:
        """`signum` to the child's process group, while the child runs."""
        if self.alive():
            signal_group(self.pid, signum)

    def wait_exit(self, *, timeout: float | None = None) -> int:
        """Its exit code; subprocess.TimeoutExpired when it runs on past `timeout`."""
        return self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGCONT (a stopped process cannot die otherwise) and SIGKILL; reap it."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.popen.wait()
        self._finish()

    def stop(self, *, grace: float = 5.0) -> int:
        """`stop_children([self], grace=grace)`; the exit code."""
        stop_children([self], grace=grace)
        return self.popen.wait()

    def _close_stdin(self) -> bool:
        """Close stdin (a child's cue to exit); whether it was open."""
        stdin = self.popen.stdin
        if stdin is None or stdin.closed:
            return False
        with contextlib.suppress(OSError):
            stdin.close()
        return True

    def _finish(self) -> None:
        """After the child is reaped: let the reader drain, close the pipes."""
        from leasecron.testing._processes import REAPER

        REAPER.unregister(self._reaper_token)
        self._close_stdin()
        if self.join_reader(timeout=5.0) and self.popen.stdout is not None:
            self.popen.stdout.close()

    def log_tail(self, *, lines: int = 20) -> str:
        return log_tail(self.log_path, lines=lines)


def stop_children(children: Iterable[ChildProcess], *, grace: float) -> None:
    """Stop `children` together: close their stdins and give them `grace` seconds to exit;
    then SIGCONT and SIGTERM what runs and give it `grace` seconds more; SIGKILL the rest.
    Idempotent."""
    children = list(children)
    for phase in ("stdin", "term"):
        if phase == "stdin":
            pending = [c for c in children if c._close_stdin() and c.alive()]
        else:
            pending = [c for c in children if c.alive()]
            for child in pending:
                child.signal(signal.SIGCONT)
                child.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in pending:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
    for child in children:
        child.kill()
