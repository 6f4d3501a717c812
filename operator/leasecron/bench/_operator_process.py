"""`leasecron operator` as a child process, with its health and metrics endpoints on free
loopback ports: what the operator benchmark and the operator's integration tests run.

Owns starting it (a `leasecron.testing` `ChildProcess`: own session, so a signal reaches its
whole process group; killed if the parent dies), reading its probes and Prometheus samples,
its CPU time and RSS from /proc (Linux), and stopping it.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from leasecron.testing import ChildProcess, free_port

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


class OperatorSubprocess(ChildProcess):
    """One `leasecron operator` child process: a `ChildProcess` whose output goes to its log."""

    def __init__(
        self,
        *,
        kubeconfig: str | Path,
        log_path: Path,
        namespaces: Sequence[str] = (),
        identity: str | None = None,
        election_namespace: str = "default",
        election_lease: str = "leasecron-operator",
        lease_duration: str = "10s",
        renew_deadline: str = "8s",
        retry_period: str = "1s",
        log_level: str = "info",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.health_port, self.metrics_port = free_port(), free_port()
        self.identity = identity or f"operator-{secrets.token_hex(3)}"
        argv = [
            *_leasecron(),
            "operator",
            *[f"--namespace={ns}" for ns in namespaces],
            f"--health-port={self.health_port}",
            f"--metrics-port={self.metrics_port}",
            "--bind-address=127.0.0.1",
            f"--log-level={log_level}",
            f"--identity={self.identity}",
            f"--election-namespace={election_namespace}",
            f"--election-lease-name={election_lease}",
            f"--election-lease-duration={lease_duration}",
            f"--election-renew-deadline={renew_deadline}",
            f"--election-retry-period={retry_period}",
            *extra_args,
        ]
        super().__init__(
            name=self.identity, argv=argv, log_path=log_path, env={"KUBECONFIG": str(kubeconfig)}
        )

    def exit_code(self) -> int | None:
        return self.returncode

    def get(self, path: str, *, port: int | None = None) -> tuple[int, str]:
        """(status, body) of GET http://127.0.0.1:<port><path>; (0, error) when unreachable."""
        url = f"http://127.0.0.1:{port or self.health_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def leading(self) -> bool:
        status, body = self.get("/readyz")
        return status == 200 and body.startswith("ok: leader")

    def wait(self, predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll `predicate()` (cross-process: there is no event to wait on) until true."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.exit_code() is not None:
                raise RuntimeError(f"operator exited ({self.exit_code()}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"operator not {what} after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics as `name{labels}` -> value."""
        status, body = self.get("/metrics", port=self.metrics_port)
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}: {body[:200]}")
        samples: dict[str, float] = {}
        for line in body.splitlines():
            match = _SAMPLE.match(line.strip())
            if match and not line.startswith("#"):
                samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for key, value in self.metrics().items():
            sample, _, rest = key.partition("{")
            if sample == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += value
        return total

    def stop(self, *, grace: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit code."""
        return super().stop(grace=grace)

    def log_tail(self, *, lines: int = 30) -> str:
        return super().log_tail(lines=lines)

    def cpu_seconds(self) -> float:
        """user + system CPU time of the process so far (Linux /proc)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def _leasecron() -> list[str]:
    """How to run the `leasecron` entry point of this interpreter's environment."""
    script = Path(sys.executable).with_name("leasecron")
    return [str(script)] if script.exists() else [sys.executable, "-m", "leasecron.cli"]
