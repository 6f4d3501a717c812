"""What the image tests share: the image under test (`LEASECRON_IMAGE`, set by
`make image-smoke`) and the engine holding it, a container as the test sees it, and the
chart's rendered RBAC applied for one test.

Owns nothing the chart or the image decide; see e2e/_containers.py for the engine and helm.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _containers import (
    RBAC_KINDS,
    Engine,
    in_cluster_args,
    kubectl_apply,
    kubectl_delete,
    pod_env,
    restricted_run_args,
    serviceaccount_dir,
)
from leasecron.testing import find_assets

IMAGE_ENV = "LEASECRON_IMAGE"
NEEDS_IMAGE = pytest.mark.skipif(
    not os.environ.get(IMAGE_ENV),
    reason=f"runs with `make image && make image-smoke` ({IMAGE_ENV} names the image)",
)


def engine_and_image_or_skip() -> tuple[Engine, str]:
    """The engine and `$LEASECRON_IMAGE`; skips naming what is missing."""
    image = os.environ[IMAGE_ENV]
    engine, reason = Engine.find()
    if engine is None:
        pytest.skip(reason)
    if not engine.image_exists(image):
        pytest.skip(f"no image {image} in {engine.name}: run `make image` first")
    return engine, image


@dataclass(frozen=True, kw_only=True)
class Running:
    """A container started by a test, and what the test needs to talk to it."""

    engine: Engine
    name: str
    namespace: str
    lease: str
    pod_name: str
    health_port: int
    metrics_port: int

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def logs(self) -> str:
        completed = self.engine.run("logs", self.name, check=False)
        return (completed.stdout + completed.stderr)[-6000:]

    def state(self) -> str:
        return self.engine.run(
            "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.name, check=False
        ).stdout.strip()


def apply_rbac(
    request: pytest.FixtureRequest, kubeconfig: Path, objects: list[dict[str, Any]]
) -> None:
    """Apply the rendered ServiceAccounts and RBAC; the cluster-scoped ones are deleted when
    the test ends (the namespaced ones go with its namespace)."""
    kubectl = find_assets().binary("kubectl")
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    cluster_scoped = [o for o in rbac if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    request.addfinalizer(lambda: kubectl_delete(kubectl, kubeconfig, cluster_scoped))
    kubectl_apply(kubectl, kubeconfig, rbac)


def start_as_pod(
    engine: Engine,
    *,
    image: str,
    spec: dict[str, Any],
    name: str,
    namespace: str,
    controlplane: Any,
    scratch: Path,
) -> None:
    """Start `spec` (a container of a rendered pod, its pod spec under "pod"; see
    `container_of`) from `image` as the kubelet would: its command, arguments and environment
    (downward API filled in with `name` and `namespace`), the pod's restricted security
    settings, and an in-cluster login as the pod's ServiceAccount (a TokenRequest token, the
    API server's ca.crt and `namespace`, written under `scratch`). The container is `name`."""
    pod = spec["pod"]
    token = controlplane.mint_token(namespace=namespace, service_account=pod["serviceAccountName"])
    secrets_dir = serviceaccount_dir(
        scratch / "serviceaccount",
        token=token,
        ca_pem=controlplane.ca_file.read_bytes(),
        namespace=namespace,
    )
    env = pod_env(spec, pod_name=name, namespace=namespace)
    command = spec["command"]
    engine.run(
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        *engine.run_flags,
        *restricted_run_args(pod=pod, container=spec),
        *in_cluster_args(secrets_dir=secrets_dir, server=controlplane.server),
        *[arg for k, v in env.items() for arg in ("-e", f"{k}={v}")],
        "--entrypoint",
        command[0],
        image,
        *command[1:],
        *spec.get("args", []),
    )
