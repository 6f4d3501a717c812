"""A real single-node Kubernetes cluster where pods run: the control plane of `ControlPlane`
plus kube-scheduler, containerd (with runc) and a kubelet and kube-proxy, all inside a network
namespace and a private mount namespace this class creates, so that nothing reaches the host's
network, mounts or sysctls.

    with NodeCluster(images=[Path("operator.tar")]) as node:
        node.kubectl("apply", "-f", "deployment.yaml")
        with node.api_client() as api:
            ...

The binaries come from the Go module proxy (`e2e/node/build.sh` and
`e2e/controlplane/build.sh`, cached in `~/.cache/leasecron/`); images are docker-archives
imported with `ctr` (no registry: use `imagePullPolicy: Never` or `IfNotPresent`). The API
server is reached from the host through a socket on 127.0.0.1 that the node forwards into its
namespace; pod and Service addresses exist only inside.

Owns the work directory, the namespaces (they go with the node's last process), the node's
cgroups (`/leasecron-<id>` in each hierarchy) and every process it started; `stop()` leaves
none of them behind. Needs root, Linux namespaces and cgroups, iproute2, util-linux, iptables,
runc and the CNI plugins; `missing_node_prerequisites()` names what is missing. Does not promise
DNS (no CoreDNS), a second node, or anything about production clusters.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kubernetes import client

from leasecron.testing import _node_pki
from leasecron.testing._access import ClusterAccess, admin_user, write_kubeconfig
from leasecron.testing._assets import KUBERNETES_VERSION, find_assets, run_helm
from leasecron.testing._children import kill_until_gone, terminate
from leasecron.testing._processes import REAPER, ControlPlaneError

CONTAINERD_VERSION = "v2.2.3"
NODE_BINARIES = (
    "kubelet",
    "kube-scheduler",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
)
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")
PAUSE_IMAGE = "localhost/leasecron/pause:1.0"
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CNI_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
HOST_TOOLS = {
    "ip": "iproute2",
    "unshare": "util-linux",
    "mount": "mount",
    "iptables": "iptables",
    "runc": "runc",
}
NODE_IP = "10.200.0.1"
SERVICE_RANGE, SERVICE_IP = "10.96.0.0/16", "10.96.0.1"
POD_RANGE, POD_GATEWAY = "10.244.0.0/24", "10.244.0.1"
_BUILD_HINT = "run `make node` (e2e/node/build.sh) to build them"


def node_cache_dir() -> Path:
    """Where `e2e/node/build.sh` caches the node's binaries and its pause image."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    version = f"node-{KUBERNETES_VERSION}-containerd-{CONTAINERD_VERSION}"
    return Path(base) / "leasecron" / version


def _cni_dir() -> Path | None:
    for directory in CNI_DIRS:
        if all((directory / plugin).is_file() for plugin in CNI_PLUGINS):
            return directory
    return None


def missing_node_prerequisites() -> list[str]:
    """What this machine lacks to run a NodeCluster, one sentence each (empty: nothing)."""
    missing: list[str] = []
    if sys.platform != "linux":
        return ["a NodeCluster needs Linux (network and mount namespaces, cgroups)"]
    if os.geteuid() != 0:
        missing.append("root (it creates network and mount namespaces and cgroups)")
    tools = [f"{tool} (package {pkg})" for tool, pkg in HOST_TOOLS.items() if not _which(tool)]
    if tools:
        missing.append("host tools: " + ", ".join(tools))
    if _cni_dir() is None:
        where = " or ".join(str(d) for d in CNI_DIRS)
        missing.append(
            f"the CNI plugins {', '.join(CNI_PLUGINS)} in {where} "
            "(package containernetworking-plugins)"
        )
    if "overlay" not in Path("/proc/filesystems").read_text():
        missing.append("the overlay filesystem (containerd's snapshotter)")
    if not Path("/sys/fs/cgroup").is_dir():
        missing.append("cgroups mounted at /sys/fs/cgroup")
    assets = find_assets()
    absent = [name for name in CONTROL_PLANE_BINARIES if name not in assets.paths]
    if absent:
        missing.append(
            f"control-plane binaries {', '.join(absent)} "
            "(run `make controlplane`, e2e/controlplane/build.sh)"
        )
    cache = node_cache_dir()
    absent = [name for name in NODE_BINARIES if not (cache / name).is_file()]
    absent += [] if (cache / "pause.tar").is_file() else ["pause.tar"]
    if absent:
        missing.append(f"node binaries {', '.join(absent)} in {cache} ({_BUILD_HINT})")
    return missing


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers and the v2 unified one)."""
    found: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split()[0] in ("cgroup", "cgroup2"):
            found.append(Path(fields[0].split()[4]))
    return found


def _remove_cgroup_tree(root: Path) -> bool:
    """rmdir `root` and everything under it, deepest first; False when something stayed."""
    if not root.exists():
        return True
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        with contextlib.suppress(OSError):
            directory.rmdir()
    try:
        root.rmdir()
    except OSError:
        return False
    return True


def _namespace_inode(pid: int, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


class NodeCluster(ClusterAccess):
    """One node cluster (see module doc): `start()`, `stop()`, or use it as a context manager."""

    def __init__(
        self,
        *,
        images: Sequence[Path] = (),
        work_dir: Path | None = None,
        node_name: str = "leasecron-node",
        start_timeout: float = 120.0,
    ) -> None:
        self.node_name = node_name
        self.node_ip = NODE_IP
        self.start_timeout = start_timeout
        self._images = [Path(p) for p in images]
        self._given_dir = work_dir
        self._dir: Path | None = None
        self._id = os.urandom(3).hex()
        self._supervisor: subprocess.Popen[bytes] | None = None
        self._namespaces: dict[str, str] = {}
        self._cgroups: list[Path] = []
        self._port = 0
        self._reaper: int | None = None
        self.startup_seconds: float | None = None

    # --- ClusterAccess ----------------------------------------------------------------

    @property
    def work_dir(self) -> Path:
        if self._dir is None:
            raise ControlPlaneError("not started", component="node")
        return self._dir

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self._port}"

    @property
    def ca_file(self) -> Path:
        return self.work_dir / "pki" / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    @property
    def token_dir(self) -> Path:
        return self.work_dir / "tokens"

    def api_client(self) -> client.ApiClient:
        pki = self.work_dir / "pki"
        return self._client_with_certificate(
            cert_file=pki / "admin.crt", key_file=pki / "admin.key"
        )

    # --- tools --------------------------------------------------------------------------

    @property
    def socket(self) -> Path:
        """containerd's socket (usable from the host: `ctr -a SOCKET -n k8s.io ...`)."""
        return self.work_dir / "state" / "containerd.sock"

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        """`kubectl ARGS` as the admin (`input` on its stdin); its stdout (AssertionError with
        stderr on failure)."""
        argv = [str(find_assets().binary("kubectl")), "--kubeconfig", str(self.kubeconfig)]
        completed = subprocess.run(
            [*argv, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and completed.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {completed.stderr.strip()}")
        return completed.stdout

    def helm(self, *args: str, timeout: float = 300) -> str:
        """`helm ARGS` as the admin, with helm homes in the work directory; its stdout."""
        completed = run_helm(
            find_assets().binary("helm"),
            *args,
            home=self.work_dir / "helm",
            kubeconfig=self.kubeconfig,
            timeout=timeout,
        )
        if completed.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {completed.stderr.strip()}")
        return completed.stdout

    def load_image(self, archive: Path, *, also_as: Sequence[str] = ()) -> list[str]:
        """Import a docker-archive or OCI archive into the node's image store, and tag the
        first image it holds under every name in `also_as` (a registry name your manifests
        use, say `docker.io/library/app:1`); the names imported."""
        ctr = [str(node_cache_dir() / "ctr"), "-a", str(self.socket), "-n", "k8s.io"]
        out = subprocess.run(
            [*ctr, "images", "import", str(archive)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if out.returncode != 0:
            raise ControlPlaneError(f"import of {archive}: {out.stderr.strip()}", component="ctr")
        names = [
            line.split()[1]
            for line in out.stdout.splitlines()
            if line.startswith("unpacking ") and len(line.split()) > 1
        ]
        if not names:  # older ctr output: read the store
            listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True)
            names = [n for n in listed.stdout.split() if not n.startswith("sha256:")][:1]
        for alias in also_as:
            subprocess.run(
                [*ctr, "images", "tag", "--force", names[0], alias],
                capture_output=True,
                check=True,
            )
        return names

    def kill_container(self, container_id: str, *, signal_name: str = "SIGKILL") -> None:
        """Send a signal to a container's process through containerd, as the kernel's OOM
        killer or `kill -9` on the node would (`container_id`: a pod's
        `status.containerStatuses[].containerID`, with or without `containerd://`)."""
        task = container_id.removeprefix("containerd://")
        ctr = [str(node_cache_dir() / "ctr"), "-a", str(self.socket), "-n", "k8s.io"]
        subprocess.run(
            [*ctr, "tasks", "kill", "--signal", signal_name, task],
            capture_output=True,
            check=True,
            timeout=30,
        )

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        missing = missing_node_prerequisites()
        if missing:
            raise ControlPlaneError(
                "cannot run here; missing: " + "; ".join(missing), component="node"
            )
        started = time.monotonic()
        self._dir = (self._given_dir or Path(tempfile.mkdtemp(prefix="leasecron-node-"))).resolve()
        self._reaper = REAPER.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def _start(self) -> None:
        work = self.work_dir
        state, logs, conf = work / "state", work / "logs", work / "conf"
        for directory in (state / "kubelet", state / "etcd", logs, conf, self.token_dir):
            directory.mkdir(parents=True, exist_ok=True)
        pki = _node_pki.generate(
            work / "pki",
            node_name=self.node_name,
            node_ip=self.node_ip,
            service_ip=SERVICE_IP,
            inner_server="https://127.0.0.1:6443",
        )
        self._cgroups = [h / f"leasecron-{self._id}" for h in _cgroup_hierarchies()]
        for cgroup in self._cgroups:
            cgroup.mkdir(exist_ok=True)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._port = int(listener.getsockname()[1])
        write_kubeconfig(
            self.kubeconfig,
            server=self.server,
            ca_pem=pki.ca.read_bytes(),
            user=admin_user(cert_file=pki.cert("admin"), key_file=pki.key("admin")),
        )
        config = self._config(pki, state, logs, conf, listener.fileno())
        (work / "node.json").write_text(json.dumps(config, indent=1))
        with (logs / "node.log").open("ab") as out:
            self._supervisor = subprocess.Popen(
                [
                    _which("unshare") or "unshare",
                    "--net",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    sys.executable,
                    "-m",
                    "leasecron.testing._node_inner",
                    str(work / "node.json"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(listener.fileno(),),
                start_new_session=True,
            )
        listener.close()
        self._wait_started(logs / "node.log")

    def _events(self, log: Path) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        return events

    def _wait_started(self, log: Path) -> None:
        assert self._supervisor is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            events = self._events(log)
            if not self._namespaces and events:
                pid = self._supervisor.pid
                for kind in ("net", "mnt"):
                    inode = _namespace_inode(pid, kind)
                    if inode is not None and inode != _namespace_inode(os.getpid(), kind):
                        self._namespaces[kind] = inode
            failed = [e for e in events if e["event"] == "failed"]
            if failed or self._supervisor.poll() is not None:
                error = failed[0]["error"] if failed else "the node's supervisor exited"
                component = next(
                    (name for name in NODE_BINARIES + CONTROL_PLANE_BINARIES if name in error),
                    "node",
                )
                log_path = self.work_dir / "logs" / f"{component}.log"
                tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
                raise ControlPlaneError(
                    error,
                    component=component,
                    log_path=log_path if log_path.exists() else log,
                    log_tail=tail,
                )
            if any(e["event"] == "up" for e in events) and self._node_ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"node not Ready within {self.start_timeout:.0f} s",
                    component="kubelet",
                    log_path=self.work_dir / "logs" / "kubelet.log",
                )
            time.sleep(0.1)

    def _node_ready(self) -> bool:
        try:
            with self.api_client() as api:
                node = client.CoreV1Api(api).read_node(self.node_name, _request_timeout=2)
        except Exception:
            return False
        conditions = (node.status.conditions if node.status else None) or []
        if not any(c.type == "Ready" and c.status == "True" for c in conditions):
            return False
        try:  # pods can be created: the default ServiceAccount is there
            with self.api_client() as api:
                client.CoreV1Api(api).read_namespaced_service_account(
                    "default", "default", _request_timeout=2
                )
        except Exception:
            return False
        return True

    def _config(
        self, pki: _node_pki.NodePki, state: Path, logs: Path, conf: Path, fd: int
    ) -> dict[str, Any]:
        assets = find_assets()
        cache = node_cache_dir()
        cni = _cni_dir()
        socket_path = state / "containerd.sock"
        cgroup_root = f"/leasecron-{self._id}"
        self._write_conf(conf, state, pki, socket_path, cgroup_root, cni)
        kubectl = [str(assets.binary("kubectl")), "--kubeconfig", str(pki.kubeconfig("admin"))]
        ctr = [str(cache / "ctr"), "-a", str(socket_path)]
        auth = [
            f"--kubeconfig={pki.kubeconfig('{}')}",
            f"--authentication-kubeconfig={pki.kubeconfig('{}')}",
            f"--authorization-kubeconfig={pki.kubeconfig('{}')}",
        ]
        steps: list[tuple[str, list[str], dict[str, str], list[str] | None]] = [
            (
                "etcd",
                [
                    str(assets.binary("etcd")),
                    "--name=node",
                    f"--data-dir={state / 'etcd'}",
                    "--listen-client-urls=http://127.0.0.1:2379",
                    "--advertise-client-urls=http://127.0.0.1:2379",
                    "--listen-peer-urls=http://127.0.0.1:2380",
                    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                    "--initial-cluster=node=http://127.0.0.1:2380",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                ],
                {},
                None,
            ),
            (
                "kube-apiserver",
                [
                    str(assets.binary("kube-apiserver")),
                    "--etcd-servers=http://127.0.0.1:2379",
                    "--bind-address=0.0.0.0",
                    "--secure-port=6443",
                    f"--advertise-address={self.node_ip}",
                    f"--cert-dir={state / 'apiserver'}",
                    f"--tls-cert-file={pki.cert('apiserver')}",
                    f"--tls-private-key-file={pki.key('apiserver')}",
                    f"--client-ca-file={pki.ca}",
                    f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
                    f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
                    "--kubelet-preferred-address-types=InternalIP",
                    "--authorization-mode=Node,RBAC",
                    "--enable-admission-plugins=NodeRestriction",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki.service_account_pub}",
                    f"--service-account-signing-key-file={pki.service_account_key}",
                    f"--service-cluster-ip-range={SERVICE_RANGE}",
                    "--allow-privileged=true",
                ],
                {},
                [*kubectl, "get", "--raw", "/readyz"],
            ),
            (
                "containerd",
                [str(cache / "containerd"), f"--config={conf / 'containerd.toml'}"],
                {"PATH": f"{cache}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"},
                [*ctr, "version"],
            ),
            (
                "kube-controller-manager",
                [
                    str(assets.binary("kube-controller-manager")),
                    *(a.format("controller-manager") for a in auth),
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    "--secure-port=10257",
                    f"--service-account-private-key-file={pki.service_account_key}",
                    f"--root-ca-file={pki.ca}",
                    "--use-service-account-credentials=true",
                ],
                {},
                None,
            ),
            (
                "kube-scheduler",
                [
                    str(cache / "kube-scheduler"),
                    *(a.format("scheduler") for a in auth),
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    "--secure-port=10259",
                ],
                {},
                None,
            ),
            (
                "kubelet",
                [
                    str(cache / "kubelet"),
                    f"--config={conf / 'kubelet.yaml'}",
                    f"--kubeconfig={pki.kubeconfig('kubelet')}",
                    f"--root-dir={state / 'kubelet'}",
                    f"--hostname-override={self.node_name}",
                    f"--node-ip={self.node_ip}",
                    "--v=1",
                ],
                {},
                None,
            ),
            (
                "kube-proxy",
                [str(cache / "kube-proxy"), f"--config={conf / 'kube-proxy.yaml'}"],
                {},
                None,
            ),
        ]
        pids = next((h for h in self._cgroups if h.parent.name in ("pids", "memory")), None)
        return {
            "node_ip": self.node_ip,
            "state": str(state),
            "logs": str(logs),
            "listen_fd": fd,
            "socket": str(socket_path),
            "ctr": str(cache / "ctr"),
            "images": [str(cache / "pause.tar"), *map(str, self._images)],
            "pod_cgroup": str(pids or self._cgroups[0]),
            "steps": steps,
        }

    def _write_conf(
        self,
        conf: Path,
        state: Path,
        pki: _node_pki.NodePki,
        socket_path: Path,
        cgroup_root: str,
        cni: Path | None,
    ) -> None:
        (conf / "cni").mkdir(exist_ok=True)
        (conf / "cni" / "10-leasecron.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "leasecron",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "lc-cni0",
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(state / "cni-ipam"),
                                "ranges": [[{"subnet": POD_RANGE, "gateway": POD_GATEWAY}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )
        runc = _which("runc")
        (conf / "containerd.toml").write_text(
            f"""version = 3
root = "{state / "containerd" / "root"}"
state = "{state / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket_path}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state / "containerd" / "opt"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  # root without CAP_SYS_RESOURCE cannot lower oom_score_adj (the sandbox asks for -998)
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni}"]
    conf_dir = "{conf / "cni"}"
    max_conf_num = 1
"""
        )
        kubelet = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": cgroup_root,
            "containerRuntimeEndpoint": f"unix://{socket_path}",
            "address": self.node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "tlsCertFile": str(pki.cert("kubelet-serving")),
            "tlsPrivateKeyFile": str(pki.key("kubelet-serving")),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca)},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            "podLogsDir": str(state / "pod-logs"),
            "failSwapOn": False,
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "serializeImagePulls": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "maxPods": 50,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
        }
        (conf / "kubelet.yaml").write_text(json.dumps(kubelet, indent=1))
        proxy = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(pki.kubeconfig("kube-proxy"))},
            "mode": "iptables",
            "hostnameOverride": self.node_name,
            "clusterCIDR": POD_RANGE,
            "bindAddress": self.node_ip,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # host-wide conntrack settings are left alone
            "conntrack": {
                "maxPerCore": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"localhostNodePorts": False},
        }
        (conf / "kube-proxy.yaml").write_text(json.dumps(proxy, indent=1))

    def stop(self) -> None:
        """Stop every process, remove the cgroups and the work directory (kept when it was
        given). Idempotent; the namespaces go with the last process inside them."""
        if self._reaper is not None:
            REAPER.unregister(self._reaper)
            self._reaper = None
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            terminate(supervisor, grace=60)
        kill_until_gone(self._leftover_pids, attempts=100)
        left = [str(c) for c in self._cgroups if not _remove_cgroup_tree(c)]
        self._cgroups = []
        if self._dir is not None and self._given_dir is None:
            shutil.rmtree(self._dir, ignore_errors=True)
        if left:
            raise ControlPlaneError(f"cgroups left behind: {', '.join(left)}", component="node")

    def leftovers(self) -> list[str]:
        """Processes still in the node's namespaces or cgroups (for tests of the harness)."""
        return [f"pid {pid}" for pid in self._leftover_pids()]

    def _leftover_pids(self) -> set[int]:
        found: set[int] = set()
        for cgroup in self._cgroups:
            for procs in cgroup.rglob("cgroup.procs") if cgroup.exists() else ():
                found.update(int(p) for p in procs.read_text().split())
        if self._namespaces:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    pid = int(entry.name)
                    for kind, inode in self._namespaces.items():
                        if _namespace_inode(pid, kind) == inode:
                            found.add(pid)
        return found

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
