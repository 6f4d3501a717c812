"""A throwaway Kubernetes control plane as local processes: etcd, kube-apiserver and
kube-controller-manager (garbage collector and namespace controllers) on free 127.0.0.1 ports,
in a temporary directory, started in a few seconds.

    with ControlPlane() as cp:
        with cp.api_client() as api:
            ...
        cp.stop_apiserver()   # the store is unreachable ...
        cp.start_apiserver()  # ... and back, same port, same data

Owns starting, probing, restarting and stopping those processes, and the cluster's work
directory (certificates, admin kubeconfig, logs). A failed start raises `ControlPlaneError`
naming the component and its log, stops whatever had started, and keeps the work directory.
Does not promise a production-like cluster: no kubelet, scheduler or admission webhooks, and
no pods ever run.
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from kubernetes import client

from leasecron._logs import get_logger
from leasecron.testing import _certs
from leasecron.testing._access import ClusterAccess, admin_user, write_kubeconfig
from leasecron.testing._assets import Assets, find_assets
from leasecron.testing._processes import (
    REAPER,
    ControlPlaneError,
    ManagedProcess,
    ProcessSpec,
    free_port,
)

_log = get_logger("leasecron.testing.controlplane")
_POLL_SECONDS = 0.05
# kube-controller-manager log lines (klog) that say both controllers are working.
_CONTROLLERS_STARTED = ('"Proceeding to collect garbage"', '"Starting namespace controller"')


def _http_get(
    *, port: int, path: str, tls: ssl.SSLContext | None, timeout: float = 2.0
) -> tuple[int, bytes] | None:
    """(status, body) of GET http(s)://127.0.0.1:port/path, None when nothing answers."""
    connection: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=timeout)
        if tls is not None
        else http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    )
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


class ControlPlane(ClusterAccess):
    """etcd + kube-apiserver + kube-controller-manager on loopback; a context manager.

    Ports are picked freely unless given (`etcd_port`, `apiserver_port`). `etcd_url` points
    the API server at an etcd you run instead of starting one. `start_timeout` bounds each
    component's wait for readiness. The work directory is removed by `stop()` unless
    `keep_workdir` is set or the start failed.
    """

    def __init__(
        self,
        *,
        assets: Assets | None = None,
        base_dir: Path | None = None,
        etcd_port: int | None = None,
        apiserver_port: int | None = None,
        etcd_url: str | None = None,
        controller_manager: bool = True,
        start_timeout: float = 60.0,
        keep_workdir: bool = False,
    ) -> None:
        self.assets = assets if assets is not None else find_assets()
        self.start_timeout = start_timeout
        self.keep_workdir = keep_workdir
        self._base_dir = base_dir
        self._etcd_port = etcd_port
        self._apiserver_port = apiserver_port
        self._etcd_url = etcd_url
        self._with_controller_manager = controller_manager
        self._workdir: Path | None = None
        self._certs: _certs.CertFiles | None = None
        self._processes: dict[str, ManagedProcess] = {}
        self._argv: dict[str, list[str]] = {}
        self._reaper_token: int | None = None
        self._version = ""
        self.startup_seconds = 0.0
        self.started_pids: dict[str, list[int]] = {}
        """Every pid this cluster ever started, per component, including stopped ones."""

    # -- public state ---------------------------------------------------------------------

    @property
    def workdir(self) -> Path:
        """The cluster's directory: certificates, kubeconfigs, `logs/<component>.log`."""
        if self._workdir is None:
            raise ControlPlaneError("not started", component="controlplane")
        return self._workdir

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def apiserver_port(self) -> int:
        if self._apiserver_port is None:
            raise ControlPlaneError("not started", component="controlplane")
        return self._apiserver_port

    @property
    def ca_file(self) -> Path:
        return self._cert_files.ca_cert

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client certificate in group system:masters)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def token_dir(self) -> Path:
        return self.workdir / "kubeconfigs"

    @property
    def version(self) -> str:
        """The API server's gitVersion, e.g. `v1.36.3`."""
        return self._version or super().version

    @property
    def pids(self) -> dict[str, int]:
        """Component name -> pid of every component currently running."""
        return {name: p.pid for name, p in self._processes.items() if p.exit_code() is None}

    def log_path(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    def api_client(self) -> client.ApiClient:
        """A new admin `kubernetes.client.ApiClient`; close it when done."""
        return self._client_with_certificate(
            cert_file=self._cert_files.admin_cert, key_file=self._cert_files.admin_key
        )

    @property
    def _cert_files(self) -> _certs.CertFiles:
        if self._certs is None:
            raise ControlPlaneError("not started", component="controlplane")
        return self._certs

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Self:
        """Start every component and return once each is ready; see the class docstring."""
        if self._workdir is not None:
            raise ControlPlaneError(
                "a ControlPlane starts once; create a new one", component="controlplane"
            )
        self._check_assets()
        self._workdir = Path(tempfile.mkdtemp(prefix="leasecron-cp-", dir=self._base_dir))
        self._reaper_token = REAPER.register(self._remove_workdir_unless_kept)
        began = time.monotonic()
        try:
            self._certs = _certs.generate(self.workdir / "pki")
            # The API server waits for etcd by itself: boot both at once, check etcd first so
            # that its failure is reported as its own.
            etcd_url = self._etcd_url or self._start_etcd()
            self._start_apiserver_process(etcd_url=etcd_url)
            if "etcd" in self._processes:
                self._wait(self._processes["etcd"], ready=self._etcd_healthy)
            self._wait_apiserver()
            write_kubeconfig(
                self.kubeconfig,
                server=self.server,
                ca_pem=self.ca_file.read_bytes(),
                user=admin_user(cert_file=self._certs.admin_cert, key_file=self._certs.admin_key),
            )
            if self._with_controller_manager:
                self._start_controller_manager()
        except BaseException as error:
            self._abort(error)
            raise
        self.startup_seconds = time.monotonic() - began
        _log.info("control plane ready", server=self.server, seconds=round(self.startup_seconds, 2))
        return self

    def stop(self) -> None:
        """Kill every component and remove the work directory (unless kept); idempotent."""
        for process in reversed(list(self._processes.values())):
            process.stop()
        self._processes.clear()
        self._remove_workdir_unless_kept()

    def stop_apiserver(self, *, graceful: bool = False) -> None:
        """Stop only the API server (clients see connection refused); etcd keeps the data.

        `graceful` sends SIGTERM and waits up to 10 s before SIGKILL."""
        process = self._processes.pop("kube-apiserver", None)
        if process is not None:
            process.stop(grace_seconds=10.0 if graceful else 0.0)
            _log.info("kube-apiserver stopped", port=self.apiserver_port)

    def start_apiserver(self, *, timeout: float | None = None) -> None:
        """Start the API server again on the same port with the same etcd; wait until ready."""
        if "kube-apiserver" in self._processes:
            raise ControlPlaneError("already running", component="kube-apiserver")
        self._spawn("kube-apiserver", self._argv["kube-apiserver"])
        try:
            self._wait_apiserver(timeout=timeout)
        except BaseException:
            self.stop_apiserver()
            raise

    def stop_etcd(self) -> None:
        """SIGKILL only etcd, keeping its data: the API server fails requests until `start_etcd`."""
        process = self._processes.pop("etcd", None)
        if process is not None:
            process.stop()
            _log.info("etcd stopped", port=self._etcd_port)

    def start_etcd(self, *, timeout: float | None = None) -> None:
        """Start etcd again (same ports and data; not with `etcd_url`); wait until healthy."""
        if "etcd" in self._processes or "etcd" not in self._argv:
            raise ControlPlaneError("running, or not started by this cluster", component="etcd")
        try:
            self._wait(
                self._spawn("etcd", self._argv["etcd"]), ready=self._etcd_healthy, timeout=timeout
            )
        except BaseException:
            self.stop_etcd()
            raise

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ------------------------------------------------------------------------

    def _check_assets(self) -> None:
        needed = ["kube-apiserver"]
        if self._etcd_url is None:
            needed.insert(0, "etcd")
        if self._with_controller_manager:
            needed.append("kube-controller-manager")
        for name in needed:
            self.assets.binary(name)

    def _spawn(self, component: str, argv: list[str]) -> ManagedProcess:
        self._argv[component] = argv
        spec = ProcessSpec(component=component, argv=argv, log_path=self.log_path(component))
        _log.info(f"starting {component}", log=str(spec.log_path))
        process = ManagedProcess(spec)
        self._processes[component] = process
        self.started_pids.setdefault(component, []).append(process.pid)
        return process

    def _wait(
        self, process: ManagedProcess, *, ready: Callable[[], bool], timeout: float | None = None
    ) -> None:
        """Poll `ready` until true; raise if the process exits or the deadline passes."""
        limit = self.start_timeout if timeout is None else timeout
        began = time.monotonic()
        while not ready():
            code = process.exit_code()
            if code is not None:
                raise self._error(process, f"exited with code {code} before it was ready")
            if time.monotonic() - began > limit:
                raise self._error(process, f"not ready after {limit:g}s")
            time.sleep(_POLL_SECONDS)
        _log.info(f"{process.component} ready", seconds=round(time.monotonic() - began, 2))

    def _error(self, process: ManagedProcess, message: str) -> ControlPlaneError:
        return ControlPlaneError(
            message,
            component=process.component,
            log_path=process.spec.log_path,
            workdir=self._workdir,
            log_tail=process.log_tail(),
        )

    def _start_etcd(self) -> str:
        client_port = self._etcd_port = self._etcd_port or free_port()
        peer_port = free_port()
        url, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            [
                str(self.assets.binary("etcd")),
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        return url

    def _etcd_healthy(self) -> bool:
        answer = _http_get(port=self._etcd_port or 0, path="/health", tls=None)
        return answer is not None and answer[0] == 200 and b'"true"' in answer[1]

    def _start_apiserver_process(self, *, etcd_url: str) -> None:
        if self._apiserver_port is None:
            self._apiserver_port = free_port()
        certs, port = self._cert_files, self.apiserver_port
        self._spawn(
            "kube-apiserver",
            [
                str(self.assets.binary("kube-apiserver")),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--client-ca-file={certs.ca_cert}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://127.0.0.1:{port}",
                f"--service-account-key-file={certs.service_account_pub}",
                f"--service-account-signing-key-file={certs.service_account_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
            ],
        )

    def _admin_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self._cert_files.ca_cert))
        context.load_cert_chain(self._cert_files.admin_cert, self._cert_files.admin_key)
        return context

    def _wait_apiserver(self, *, timeout: float | None = None) -> None:
        tls = self._admin_tls()

        def ready() -> bool:
            answer = _http_get(port=self.apiserver_port, path="/readyz", tls=tls)
            return answer is not None and answer == (200, b"ok")

        self._wait(self._processes["kube-apiserver"], ready=ready, timeout=timeout)
        answer = _http_get(port=self.apiserver_port, path="/version", tls=tls)
        if answer is not None and answer[0] == 200:
            self._version = str(json.loads(answer[1]).get("gitVersion", ""))

    def _start_controller_manager(self) -> None:
        process = self._spawn(
            "kube-controller-manager",
            [
                str(self.assets.binary("kube-controller-manager")),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--controllers=garbage-collector-controller,namespace-controller",
                "--use-service-account-credentials=false",
                "--secure-port=0",
            ],
        )

        def started() -> bool:  # no serving port (--secure-port=0): its log is all we have
            return all(process.log_contains(line) for line in _CONTROLLERS_STARTED)

        self._wait(process, ready=started)

    def _abort(self, error: BaseException) -> None:
        """Stop everything after a failed start; keep the work directory for a real failure."""
        for process in reversed(list(self._processes.values())):
            process.stop()
        self._processes.clear()
        if isinstance(error, ControlPlaneError):
            self.keep_workdir = True
            _log.error("control plane failed to start", workdir=str(self._workdir))
        self._remove_workdir_unless_kept()

    def _remove_workdir_unless_kept(self) -> None:
        if self._reaper_token is not None:
            REAPER.unregister(self._reaper_token)
            self._reaper_token = None
        if self._workdir is not None and not self.keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
