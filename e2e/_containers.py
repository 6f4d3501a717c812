"""Container and chart helpers for the image tests: the container engine (docker or podman,
as `e2e/containers/engine.sh` picks it), the chart rendered with the real helm binary, and a
pod's in-cluster login (ServiceAccount token, ca.crt, namespace) reproduced as a directory to
mount where a pod has it.

Owns only what those tests share; builds no image (that is `make image`) and starts no
cluster (the `controlplane` fixture does).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client

from leasecron.testing import run_helm

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "leasecron"
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass(frozen=True, kw_only=True)
class Engine:
    """docker or podman. podman runs with runc (crun refuses cgroups v1 hybrid hosts) and
    explicit file/process limits (runc cannot inherit the host's here)."""

    name: str

    @classmethod
    def find(cls) -> tuple[Engine | None, str]:
        """The engine `e2e/containers/engine.sh` picks, or None and the reason there is none."""
        completed = subprocess.run(
            ["bash", str(ROOT / "e2e" / "containers" / "engine.sh")],
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode != 0:
            return None, completed.stderr.strip()
        return cls(name=completed.stdout.strip()), ""

    @property
    def command(self) -> list[str]:
        return ["podman", "--runtime", "runc"] if self.name == "podman" else [self.name]

    @property
    def run_flags(self) -> list[str]:
        if self.name == "podman":
            return ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        return []

    def run(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            [*self.command, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and completed.returncode != 0:
            raise AssertionError(
                f"{self.name} {' '.join(args)} exited {completed.returncode}:\n{completed.stderr}"
            )
        return completed

    def image_exists(self, image: str) -> bool:
        return self.run("image", "inspect", image, check=False).returncode == 0


@dataclass(frozen=True, kw_only=True)
class Helm:
    """The helm binary with its own homes, so nothing of the user's configuration leaks in."""

    binary: Path
    home: Path

    def run(self, *args: str, kubeconfig: Path | None = None, timeout: float = 300) -> str:
        completed = run_helm(
            self.binary, *args, home=self.home, kubeconfig=kubeconfig, timeout=timeout
        )
        if completed.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}:\n{completed.stderr}")
        return completed.stdout

    def template(
        self, release: str, *, namespace: str, values: Mapping[str, Any], kube_version: str
    ) -> list[dict[str, Any]]:
        """The chart's objects for `values` (written to a values file, so lists stay lists)."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(dict(values), f)
        try:
            out = self.run(
                "template",
                release,
                str(CHART),
                "-n",
                namespace,
                "-f",
                f.name,
                "--kube-version",
                kube_version,
            )
        finally:
            os.unlink(f.name)
        return [doc for doc in yaml.safe_load_all(out) if doc]


def kubectl_apply(kubectl: Path, kubeconfig: Path, objects: Sequence[Mapping[str, Any]]) -> None:
    """`kubectl apply` of `objects` (server-side, so re-applying is harmless)."""
    completed = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "--server-side", "-f", "-"],
        input=yaml.safe_dump_all(list(objects)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        raise AssertionError(f"kubectl apply:\n{completed.stderr}")


def kubectl_delete(kubectl: Path, kubeconfig: Path, objects: Sequence[Mapping[str, Any]]) -> None:
    """Best-effort `kubectl delete` of `objects` (the cluster-scoped ones outlive a namespace)."""
    subprocess.run(
        [
            str(kubectl),
            "--kubeconfig",
            str(kubeconfig),
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
        ],
        input=yaml.safe_dump_all(list(objects)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def serviceaccount_dir(directory: Path, *, token: str, ca_pem: bytes, namespace: str) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount: `token`,
    `ca.crt` and `namespace`, readable by any uid (the container runs as 65532)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in (
        ("token", token.encode()),
        ("ca.crt", ca_pem),
        ("namespace", namespace.encode()),
    ):
        path = directory / name
        path.write_bytes(content)
        path.chmod(0o644)
    directory.chmod(0o755)
    return directory


def container_of(objects: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The container `name` of the (only) Deployment among the rendered `objects`, with the
    pod's spec under the key "pod"."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == name]
    return {**container, "pod": pod}


def restricted_run_args(*, pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    """Engine flags that make a container run as the pod spec asks, for the restricted
    security settings the chart and the example app use: the pod's user and group, a
    read-only root filesystem with each mounted volume (emptyDirs) as a tmpfs, no
    capabilities, no privilege escalation. Fails on a spec asking for anything else."""
    pod_security, security = pod["securityContext"], container["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and "add" not in security["capabilities"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    tmpfs = []
    for mount in container.get("volumeMounts", []):
        assert "emptyDir" in volumes[mount["name"]], f"only emptyDir volumes are mapped: {mount}"
        tmpfs += ["--tmpfs", mount["mountPath"]]
    return [
        "--user",
        f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}",
        "--read-only",
        *tmpfs,
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
    ]


def pod_env(container: Mapping[str, Any], *, pod_name: str, namespace: str) -> dict[str, str]:
    """The container's environment, the downward API's name and namespace filled in."""
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace}
    return {
        e["name"]: e["value"] if "value" in e else downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container.get("env", [])
    }


def in_cluster_args(*, secrets_dir: Path, server: str) -> list[str]:
    """The in-cluster login of a pod: its ServiceAccount directory mounted where the kubelet
    mounts it, and the API server's address in KUBERNETES_SERVICE_HOST/PORT."""
    address = urlsplit(server)
    return [
        "-v",
        f"{secrets_dir}:{SERVICEACCOUNT_DIR}:ro",
        "-e",
        f"KUBERNETES_SERVICE_HOST={address.hostname}",
        "-e",
        f"KUBERNETES_SERVICE_PORT={address.port}",
    ]


def lease_holder(api: Any, namespace: str, name: str) -> str | None:
    """The Lease's holderIdentity ("" when released), or None when there is no such Lease."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return str((lease.spec and lease.spec.holder_identity) or "")


def metric_total(text: str, name: str) -> float:
    """The sum of every sample of `name` in a Prometheus text exposition."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((f"{name}{{", f"{name} "))
    )
