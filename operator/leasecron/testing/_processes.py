"""Child processes of a throwaway control plane: started in their own process group with their
output in a log file, killed as a group, and never left behind.

Owns free-port picking, starting/stopping one component, `ControlPlaneError` (the one error
the harness raises), and the process-wide reaper that runs registered cleanups on exit,
SIGTERM and SIGHUP (Ctrl-C unwinds as KeyboardInterrupt, so the callers' `finally` blocks
handle it; the reaper's atexit hook is the backstop). When started from the main thread a
child also gets a parent-death signal, so even a SIGKILLed parent leaves nothing running.
Does not promise that a port found free stays free until a server binds it (ports are picked
below the kernel's ephemeral range, so at least outgoing connections never take them), nor
anything about processes it did not start.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from leasecron.testing._children import log_tail, pdeathsig_prefix, signal_group

Cleanup = Callable[[], None]
_LOWEST_PORT = 10_000
_ports_lock = threading.Lock()
_handed_out: set[int] = set()


class ControlPlaneError(RuntimeError):
    """A control-plane component could not be found, started, or made ready.

    `component` is the binary or step that failed (`etcd`, `kube-apiserver`,
    `kube-controller-manager`, `build`, ...), `log_path` its log file when it ran, and
    `workdir` the cluster directory kept for inspection after a failed start.
    """

    def __init__(
        self,
        message: str,
        *,
        component: str,
        log_path: Path | None = None,
        workdir: Path | None = None,
        log_tail: str = "",
    ) -> None:
        self.component = component
        self.log_path = log_path
        self.workdir = workdir
        parts = [f"{component}: {message}"]
        if log_path is not None:
            parts.append(f"log: {log_path}")
        if workdir is not None:
            parts.append(f"kept for inspection: {workdir}")
        if log_tail:
            parts.append("last log lines:\n" + log_tail)
        super().__init__("\n".join(parts))


def _ephemeral_low() -> int:
    try:
        low, _high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low)
    except (OSError, ValueError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A 127.0.0.1 TCP port nobody listens on, not handed out before by this process.

    Below the ephemeral range when there is room, so a client's outgoing connection can never
    hold the port while a stopped API server is about to bind it again."""
    low = _ephemeral_low()
    with _ports_lock:
        for _ in range(200 if low - _LOWEST_PORT >= 1000 else 0):
            port = random.randint(_LOWEST_PORT, low - 1)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
        while True:  # no room below the ephemeral range: let the kernel choose
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


class _Reaper:
    """Runs registered cleanups once: at exit, or on SIGTERM/SIGHUP before the signal's default."""

    _SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._cleanups: dict[int, Cleanup] = {}
        self._ids = itertools.count()
        self._installed = False

    def register(self, cleanup: Cleanup) -> int:
        with self._lock:
            self._install()
            token = next(self._ids)
            self._cleanups[token] = cleanup
            return token

    def unregister(self, token: int) -> None:
        with self._lock:
            self._cleanups.pop(token, None)

    def run_all(self) -> None:
        with self._lock:
            pending = list(self._cleanups.values())
            self._cleanups.clear()
        for cleanup in reversed(pending):
            with contextlib.suppress(Exception):
                cleanup()

    def _install(self) -> None:
        if self._installed:
            return
        self._installed = True
        atexit.register(self.run_all)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread; atexit still runs
        for signum in self._SIGNALS:
            previous = signal.getsignal(signum)
            if previous in (signal.SIG_IGN, None):
                continue
            signal.signal(signum, self._make_handler(previous))

    def _make_handler(
        self, previous: Callable[[int, FrameType | None], object] | int
    ) -> Callable[[int, FrameType | None], None]:
        def handle(signum: int, frame: FrameType | None) -> None:
            self.run_all()
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        return handle


REAPER = _Reaper()


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    """What to run for one component and where its output goes."""

    component: str
    argv: Sequence[str]
    log_path: Path


class ManagedProcess:
    """One running component. `stop()` kills its whole process group and reaps it."""

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with spec.log_path.open("ab") as log:
            log.write(f"$ {' '.join(spec.argv)}\n".encode())
            log.flush()
            try:
                self._popen = subprocess.Popen(
                    [*pdeathsig_prefix(), *spec.argv],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as error:
                raise ControlPlaneError(
                    f"could not start {spec.argv[0]}: {error}",
                    component=spec.component,
                    log_path=spec.log_path,
                ) from error
        self._token = REAPER.register(self.stop)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def component(self) -> str:
        return self.spec.component

    def exit_code(self) -> int | None:
        """None while it runs; negative N when killed by signal N."""
        return self._popen.poll()

    def stop(self, *, grace_seconds: float = 0.0) -> None:
        """SIGTERM then (after `grace_seconds`) SIGKILL the process group; idempotent."""
        REAPER.unregister(self._token)
        if self._popen.poll() is None and grace_seconds > 0:
            signal_group(self._popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=grace_seconds)
        # Kill the group even when the leader is gone: a forked helper may still be in it.
        signal_group(self._popen.pid, signal.SIGKILL)
        self._popen.wait()

    def log_tail(self, *, lines: int = 15) -> str:
        return log_tail(self.spec.log_path, lines=lines)

    def log_contains(self, needle: str) -> bool:
        try:
            return needle in self.spec.log_path.read_text(errors="replace")
        except OSError:
            return False
