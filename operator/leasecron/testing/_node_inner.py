"""The inside of a `NodeCluster`: the process that `_node.NodeCluster` starts with
`unshare --net --mount --propagation private` and that runs every component of the node.

    python -m leasecron.testing._node_inner CONFIG.json

In its new network namespace it sets up the node's address on a veth pair whose both ends are
inside (the default route points into it, so nothing leaves the namespace); in its private
mount namespace it mounts tmpfs on /run, /var/lib and /var/log (the paths the kubelet, runc,
the shims and libcni hard-code) and binds files holding the kubelet's preferred values over
three /proc/sys entries, so the kubelet never changes the host's sysctls. All of it goes with
the namespaces when the last process inside exits. It then starts etcd, kube-apiserver,
containerd (and imports the images), kube-controller-manager, kube-scheduler, the kubelet and
kube-proxy, forwards the listening socket it inherited (host loopback) to the API server,
and prints one JSON line per step on stdout.

It is a child subreaper, so the containerd shims stay its descendants. On SIGTERM it stops the
node in order: kube-proxy and the kubelet, every process in the node's pod cgroups, containerd,
what is left of its descendants, then the control plane. Owns nothing the parent cleans up
(cgroup directories, the work directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leasecron.testing._children import kill_until_gone, terminate

PR_SET_CHILD_SUBREAPER = 36
SYSCTLS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
STOP_ORDER = (
    "kube-proxy",
    "kubelet",
    "containerd",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)


def say(event: str, **fields: Any) -> None:
    """One JSON line on stdout for the parent."""
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def run(*argv: str) -> None:
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {completed.stderr.strip()}")


def wire_network(config: dict[str, Any]) -> None:
    """lo up; the node address on one end of a veth pair, both ends here; default route."""
    address, link = config["node_ip"], "lc0"
    run("ip", "link", "set", "lo", "up")
    run("ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}-peer")
    run("ip", "addr", "add", f"{address}/24", "dev", link)
    run("ip", "link", "set", f"{link}-peer", "up")
    run("ip", "link", "set", link, "up")
    run("ip", "route", "add", "default", "dev", link)


def mount_private(state: Path) -> None:
    """tmpfs over the hard-coded paths, the kubelet's root bound where it expects it, and
    fake sysctl files; private to this mount namespace."""
    for target in ("/run", "/var/lib", "/var/log"):
        run("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", target)
    for directory in ("/run/containerd", "/run/netns", "/var/lib/kubelet", "/var/log/containers"):
        Path(directory).mkdir(parents=True, exist_ok=True)
    run("mount", "--bind", str(state / "kubelet"), "/var/lib/kubelet")
    fake = state / "sysctl"
    fake.mkdir(exist_ok=True)
    for key, value in SYSCTLS.items():
        path = fake / key.replace("/", "_")
        path.write_text(f"{value}\n")
        run("mount", "--bind", str(path), f"/proc/sys/{key}")


def forward(listener: socket.socket, port: int) -> None:
    """Copy every connection accepted on `listener` (a socket of the host's network
    namespace) to 127.0.0.1:`port` here, in a daemon thread."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def serve() -> None:
        server = await asyncio.start_server(handle, sock=listener)
        await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True, name="forward").start()


class Components:
    """The node's processes by name, their logs in the work directory."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with (self.logs / f"{name}.log").open("ab") as log:
            self.running[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
            )
        say("started", component=name, pid=self.running[name].pid)

    def exited(self) -> str | None:
        for name, process in self.running.items():
            if process.poll() is not None:
                return f"{name} exited with {process.returncode}"
        return None

    def stop(self, name: str, grace: float = 5.0) -> None:
        process = self.running.pop(name, None)
        if process is not None:
            terminate(process, grace=grace)


def wait_for(what: str, check: Callable[[], bool], components: Components, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        problem = components.exited()
        if problem is not None:
            raise RuntimeError(f"waiting for {what}: {problem}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {timeout:.0f} s")
        time.sleep(0.05)
    say("ready", component=what)


def succeeds(*argv: str) -> Callable[[], bool]:
    return lambda: subprocess.run(argv, capture_output=True, check=False).returncode == 0


def kill_cgroup_tree(root: Path) -> None:
    """SIGKILL every process in the cgroup tree `root` (one hierarchy is enough: every
    process of a pod is in each hierarchy's pod cgroup)."""
    kill_until_gone(
        lambda: [
            int(pid)
            for procs in root.rglob("cgroup.procs")
            for pid in procs.read_text().split()
            if pid.strip()
        ],
        attempts=50,
    )


def reap_descendants() -> None:
    """SIGKILL every process whose parent is this one (shims reparented here), then reap."""
    me = str(os.getpid())
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(status.parent.name), signal.SIGKILL)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.05)
        except ChildProcessError:
            return


def main(config_path: str) -> int:
    config = json.loads(Path(config_path).read_text())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    state, logs = Path(config["state"]), Path(config["logs"])
    components = Components(logs)
    code = 0
    try:
        wire_network(config)
        mount_private(state)
        listener = socket.socket(fileno=config["listen_fd"])
        forward(listener, 6443)
        for name, argv, env, ready in config["steps"]:
            components.start(name, argv, env)
            if ready:
                wait_for(name, succeeds(*ready), components, timeout=90)
            for archive in config["images"] if name == "containerd" else ():
                run(
                    config["ctr"],
                    "-a",
                    config["socket"],
                    "-n",
                    "k8s.io",
                    "images",
                    "import",
                    archive,
                )
                say("imported", archive=archive)
        say("up")
        while not stopping.wait(0.2):
            problem = components.exited()
            if problem is not None:
                say("failed", error=problem)
                code = 1
                break
    except Exception as e:  # reported to the parent, then everything is stopped
        say("failed", error=str(e))
        code = 1
    for name in STOP_ORDER:
        if name == "containerd":
            kill_cgroup_tree(Path(config["pod_cgroup"]))
        components.stop(name)
    reap_descendants()
    say("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
