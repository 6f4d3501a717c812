"""Connection-level faults: a Toxiproxy server in front of the API server, one proxy per client.

Owns starting and stopping `toxiproxy-server` (built by e2e/toxiproxy/build.sh into
`${XDG_CACHE_HOME:-~/.cache}/leasecron/toxiproxy-<version>/`, or `$LEASECRON_TOXIPROXY`), the
few calls of its HTTP API that tests need, and a kubeconfig that reaches the API server through
a proxy. Request-level faults (a lost reply to one Lease update) are `leasecron.testing.faults`;
this module breaks whole connections. Only loopback upstreams (127.0.0.0/8) are accepted. Does
not promise anything about timing beyond what Toxiproxy itself does.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import urlsplit, urlunsplit

import yaml

from leasecron.testing._access import ClusterAccess
from leasecron.testing._assets import cache_dir
from leasecron.testing._processes import ControlPlaneError, ManagedProcess, ProcessSpec, free_port

TOXIPROXY_VERSION = "v2.12.0"
Stream = Literal["upstream", "downstream", "both"]
_HINT = "run e2e/toxiproxy/build.sh (or `make controlplane`) to build it"


def toxiproxy_binary() -> Path:
    """`$LEASECRON_TOXIPROXY`, else the cached build (built now when the repository's build
    script is at hand); ControlPlaneError saying what to run otherwise."""
    explicit = os.environ.get("LEASECRON_TOXIPROXY")
    binary = (
        Path(explicit)
        if explicit
        else cache_dir().parent / f"toxiproxy-{TOXIPROXY_VERSION}" / "toxiproxy-server"
    )
    if not binary.is_file() and not explicit:
        script = next(
            (
                p / "e2e" / "toxiproxy" / "build.sh"
                for p in Path(__file__).resolve().parents
                if (p / "e2e" / "toxiproxy" / "build.sh").is_file()
            ),
            None,
        )
        if script is not None:
            subprocess.run(["bash", str(script)], stdout=subprocess.DEVNULL, check=False)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise ControlPlaneError(f"{binary} not found; {_HINT}", component="toxiproxy")
    return binary


def _loopback(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or address not in ipaddress.ip_network("127.0.0.0/8"):
        raise ValueError(f"Toxiproxy may only target 127.0.0.0/8, got host {host!r}")
    return host


class Proxy:
    """One proxy: listens on `127.0.0.1:port` and forwards to `upstream`. Faults last until
    `heal()` (for `partition`) or `clear()` (everything)."""

    def __init__(self, server: Toxiproxy, *, name: str, port: int, upstream: str) -> None:
        self._server = server
        self.name = name
        self.host = "127.0.0.1"
        self.port = port
        self.upstream = upstream

    def partition(self) -> None:
        """Disable the proxy: open connections are closed, new ones refused."""
        self._server.api("POST", f"/proxies/{self.name}", {"enabled": False})

    def heal(self) -> None:
        """Enable the proxy again (toxics stay; see `clear`)."""
        self._server.api("POST", f"/proxies/{self.name}", {"enabled": True})

    def reset_peer(self, *, stream: Stream = "upstream", after_ms: int = 0) -> None:
        """Cut connections `after_ms` after data next flows in `stream`: on upstream (the
        default) the client's next request is dropped, so a write's outcome is unknown to it
        (and it did not land). Connections opened after this call see a TCP reset; ones
        already open see the connection closed (Toxiproxy sets SO_LINGER 0 only on new ones)."""
        self._toxic("reset_peer", stream, {"timeout": after_ms})

    def blackhole(self, *, stream: Stream = "both") -> None:
        """Silently drop data and keep the connections open (Toxiproxy's timeout toxic with
        timeout 0): requests time out, a watch goes quiet without an error."""
        self._toxic("timeout", stream, {"timeout": 0})

    def latency(self, ms: int, *, stream: Stream = "downstream", jitter_ms: int = 0) -> None:
        """Delay data by `ms` (plus up to `jitter_ms`)."""
        if ms < 0 or jitter_ms < 0:
            raise ValueError(f"latency needs ms >= 0 and jitter_ms >= 0, got {ms}, {jitter_ms}")
        self._toxic("latency", stream, {"latency": ms, "jitter": jitter_ms})

    def clear(self) -> None:
        """Remove every toxic and enable the proxy: a clean pipe again."""
        for toxic in self._server.api("GET", f"/proxies/{self.name}/toxics") or []:
            self._server.api("DELETE", f"/proxies/{self.name}/toxics/{toxic['name']}")
        self.heal()

    def _toxic(self, kind: str, stream: Stream, attributes: dict[str, int]) -> None:
        if stream not in ("upstream", "downstream", "both"):
            raise ValueError(f"stream must be upstream, downstream or both, got {stream!r}")
        for direction in ("upstream", "downstream") if stream == "both" else (stream,):
            body = {
                "name": f"{kind}_{direction}",
                "type": kind,
                "stream": direction,
                "toxicity": 1.0,
                "attributes": attributes,
            }
            self._server.api("POST", f"/proxies/{self.name}/toxics", body)

    def __repr__(self) -> str:
        return f"Proxy({self.name!r}, 127.0.0.1:{self.port} -> {self.upstream})"


class Toxiproxy:
    """A toxiproxy-server on a free 127.0.0.1 port, for a `with` block (stopped on exit, no
    process left behind)."""

    def __init__(self, *, binary: Path | None = None) -> None:
        self._binary = binary
        self._process: ManagedProcess | None = None
        self._workdir: Path | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        binary = self._binary or toxiproxy_binary()
        self._workdir = Path(tempfile.mkdtemp(prefix="leasecron-toxiproxy-"))
        self.port = free_port()
        argv = [str(binary), "-host", "127.0.0.1", "-port", str(self.port)]
        log_path = self._workdir / "toxiproxy.log"
        self._process = ManagedProcess(
            ProcessSpec(component="toxiproxy", argv=argv, log_path=log_path)
        )
        deadline = time.monotonic() + 15.0
        while True:
            try:
                self.api("GET", "/version")
                return self
            except (OSError, ControlPlaneError) as e:
                if self._process.exit_code() is not None or time.monotonic() > deadline:
                    tail = self._process.log_tail()
                    self.stop()
                    raise ControlPlaneError(
                        f"toxiproxy-server did not answer on {self.url}: {e}",
                        component="toxiproxy",
                        log_tail=tail,
                    ) from e
                time.sleep(0.05)  # polling a starting server: nothing to wait on

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def proxy(self, name: str, upstream_port: int, *, upstream_host: str = "127.0.0.1") -> Proxy:
        """A new proxy on a free loopback port forwarding to `upstream_host:upstream_port`."""
        upstream = f"{_loopback(upstream_host)}:{int(upstream_port)}"
        port = free_port()
        body = {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream}
        self.api("POST", "/proxies", {**body, "enabled": True})
        return Proxy(self, name=name, port=port, upstream=upstream)

    def api(self, method: str, path: str, body: object | None = None) -> Any:
        """One call to Toxiproxy's HTTP API; the decoded JSON reply (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace").strip()
            raise ControlPlaneError(
                f"{method} {path} -> HTTP {e.code}: {detail}", component="toxiproxy"
            ) from e
        return json.loads(raw) if raw.strip() else None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def kubeconfig_via(access: ClusterAccess, proxy: Proxy, path: Path) -> Path:
    """Write a copy of `access`'s admin kubeconfig whose server is `proxy` (same credentials;
    the API server's serving certificate covers 127.0.0.1). Returns `path`."""
    document = yaml.safe_load(access.kubeconfig.read_text())
    for entry in document.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        parts = urlsplit(str(cluster.get("server", "")))
        _loopback(parts.hostname or "")
        cluster["server"] = urlunsplit(parts._replace(netloc=f"{proxy.host}:{proxy.port}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
