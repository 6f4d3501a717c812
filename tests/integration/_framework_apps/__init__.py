"""The example web applications of examples/frameworks/ started with their real servers as
"pods" (processes with their own POD_NAME), and what the tests read back from them: the
invoice lines the once-per-tick handler writes, the pod lock file, the group's member Leases.

Owns the command line of each server and the waiting on what another process does (polling:
there is nothing to watch). Does not judge what it reads; the tests do.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api

from leasecron.coordination.members import member_selector
from leasecron.testing import ChildProcess, free_port, poll

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "frameworks"
GROUP = "web"
_PID = re.compile(r"contending for the pod lock.*?pid=(\d+)")


def server_argv(server: str, *, port: int, workers: int = 1) -> list[str]:
    """The command line that serves one example app on `port`."""
    py = sys.executable
    gunicorn = [py, "-m", "gunicorn", "-c", str(EXAMPLES / "gunicorn.conf.py"), "-w", str(workers)]
    return {
        "fastapi": [py, "-m", "uvicorn", "fastapi_app:app", "--host", "127.0.0.1",
                    "--port", str(port), "--workers", str(workers)],
        "flask": [*gunicorn, "flask_app:app"],
        "django": [*gunicorn, "django_site.wsgi"],
        "runserver": [py, str(EXAMPLES / "manage.py"), "runserver", f"127.0.0.1:{port}"],
        "command": [py, str(EXAMPLES / "manage.py"), "leasecron_scheduler"],
    }[server]  # fmt: skip


@dataclass
class Pod:
    """One server process standing in for one pod."""

    name: str
    port: int
    process: ChildProcess
    lock_dir: Path

    def status(self) -> dict[str, Any] | None:
        """GET /leasecron of whichever worker answers; None while nothing answers."""
        url = f"http://127.0.0.1:{self.port}/leasecron"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                found: dict[str, Any] = json.loads(reply.read())
                return found
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def lock_holder(self) -> tuple[int, str] | None:
        """(pid, identity) written in the pod lock file by its holder, or None."""
        for path in self.lock_dir.glob("*.lock"):
            words = path.read_text().split()
            if len(words) == 2:
                return int(words[0]), words[1]
        return None

    def contenders(self) -> set[int]:
        """Pids of the workers that logged contending for the pod lock."""
        return {int(pid) for pid in _PID.findall(self.process.log_path.read_text())}

    def terminate(self, *, timeout: float = 40.0) -> int:
        """SIGTERM to the server's main process only (as the kubelet does); its exit code."""
        os.kill(self.process.pid, 15)
        return self.process.wait_exit(timeout=timeout)


@contextlib.contextmanager
def running_pods(
    server: str,
    names: list[str],
    *,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    workers: int = 1,
    env: dict[str, str] | None = None,
) -> Iterator[list[Pod]]:
    """Each of `names` a pod serving the example app with `server`; killed after."""
    pods: list[Pod] = []
    try:
        for name in names:
            port = free_port()
            lock_dir = tmp_path / name / "locks"
            pod_env = {
                "KUBECONFIG": str(kubeconfig),
                "POD_NAMESPACE": namespace,
                "POD_NAME": name,
                "LEASECRON_GROUP": GROUP,
                "INVOICES_FILE": str(invoices_path(tmp_path)),
                "LEASECRON_LOCK_DIR": str(lock_dir),
                "PYTHONPATH": str(EXAMPLES),
                "PORT": str(port),
                **(env or {}),
            }
            argv = server_argv(server, port=port, workers=workers)
            process = ChildProcess(
                name=name, argv=argv, log_path=tmp_path / f"{name}.log", env=pod_env
            )
            pods.append(Pod(name=name, port=port, process=process, lock_dir=lock_dir))
        yield pods
    finally:
        for pod in pods:
            pod.process.kill()


def invoices_path(tmp_path: Path) -> Path:
    return tmp_path / "invoices.txt"


def invoices(tmp_path: Path) -> list[tuple[str, str, str]]:
    """(tick, identity, token) of every line the once-per-tick handler wrote."""
    path = invoices_path(tmp_path)
    lines = path.read_text().splitlines() if path.exists() else []
    return [tuple(line.split()) for line in lines if len(line.split()) == 3]  # type: ignore[misc]


def ticks_per_tick(tmp_path: Path) -> dict[str, int]:
    return dict(collections.Counter(tick for tick, _, _ in invoices(tmp_path)))


def wait_for_ticks(tmp_path: Path, count: int, *, timeout: float = 60.0) -> dict[str, int]:
    """Until at least `count` distinct ticks were written; the count of lines per tick."""
    return poll(
        lambda: (found := ticks_per_tick(tmp_path)) and len(found) >= count and found,
        timeout=timeout,
        what=f"{count} ticks written",
        interval=0.2,
    )


def members(api: ApiClient, namespace: str) -> list[str]:
    """The identities (holders) of the group's member Leases."""
    listed = CoordinationV1Api(api).list_namespaced_lease(
        namespace, label_selector=member_selector(GROUP)
    )
    return sorted(str(lease.spec.holder_identity) for lease in listed.items)


def lease_holder(api: ApiClient, namespace: str, name: str) -> str:
    """The holder of Lease `name` ("" when released)."""
    lease = CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    return str(lease.spec.holder_identity or "")
