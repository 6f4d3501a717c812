"""The real-pod scenarios (e2e/_real_pod_tests.py, e2e/_scenarios.py) on a cluster made by
kind (pytest-kind): the operator image of the commit under test is built, tagged with the
names the chart's default values and the example app use, and loaded into the kind node; the
same tests as e2e/test_real_pods.py then run on it.

Runs where a container engine (docker, or podman as kind's experimental provider) can get
kind's node image. It skips with the reason elsewhere: on a machine without a registry kind
has no node image (`kind create cluster` pulls kindest/node), and Kubernetes 1.35+ nodes
need cgroup v2. kind itself is built from the Go module proxy when it is not on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import _scenarios as scenarios
from _containers import Engine, Helm
from _operator_image import operator_image
from _real_pod_tests import *  # noqa: F403 (the shared tests, run on this module's cluster)
from leasecron.testing import cache_dir, find_assets

pytestmark = [pytest.mark.kind, pytest.mark.e2e, pytest.mark.timeout(900)]

KIND_VERSION = "v0.33.0"
# The v1.36 node image built for kind v0.33.0 (kind requires the digest of its own release).
NODE_IMAGE = (
    "docker.io/kindest/node:v1.36.4"
    "@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
)


def skip_reason(engine: Engine | None, why_no_engine: str) -> str | None:
    """Why kind cannot run here, or None."""
    if engine is None:
        return f"kind needs a container engine: {why_no_engine}"
    if not engine.image_exists(NODE_IMAGE):
        pulled = engine.run("pull", NODE_IMAGE, check=False, timeout=600)
        if pulled.returncode != 0:
            last = (pulled.stderr.strip().splitlines() or ["no output"])[-1]
            return f"kind cannot get its node image {NODE_IMAGE} with {engine.name}: {last}"
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return f"the kind node {NODE_IMAGE} runs Kubernetes 1.36, which needs cgroup v2"
    return None


def kind_binary() -> Path:
    """`kind` from PATH, else kind KIND_VERSION built from the Go module proxy and cached."""
    on_path = shutil.which("kind")
    if on_path:
        return Path(on_path)
    dest = cache_dir().parent / f"kind-{KIND_VERSION}"
    binary = dest / "kind"
    if not binary.exists():
        if shutil.which("go") is None:
            pytest.skip(f"kind is not on PATH and Go is missing to build kind {KIND_VERSION}")
        subprocess.run(
            ["go", "install", f"sigs.k8s.io/kind@{KIND_VERSION}"],
            env={**os.environ, "GOBIN": str(dest)},
            check=True,
            timeout=900,
        )
    return binary


@dataclass(frozen=True)
class Kind:
    """A pytest-kind cluster as the scenarios use it."""

    cluster: Any
    engine: Engine

    @property
    def kubeconfig(self) -> Path:
        return Path(self.cluster.kubeconfig_path)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return str(self.cluster.kubectl(*args, input=input))

    def helm(self, *args: str) -> str:
        home = Path(self.cluster.path) / "helm"
        return Helm(binary=find_assets().binary("helm"), home=home).run(
            *args, kubeconfig=self.kubeconfig, timeout=600
        )

    def kill_container(self, container_id: str) -> None:
        """SIGKILL through the node's containerd (`ctr` in kind's node container)."""
        task = container_id.removeprefix("containerd://")
        self.engine.run(
            "exec", f"{self.cluster.name}-control-plane",
            "ctr", "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", task,
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    engine, why = Engine.find()
    reason = skip_reason(engine, why)
    if reason is not None:
        pytest.skip(reason)
    assert engine is not None
    from pytest_kind import KindCluster

    image = operator_image()
    if isinstance(image, str):
        pytest.skip(image)
    kubectl = find_assets().paths.get("kubectl")
    kind = KindCluster(
        "leasecron-e2e", image=NODE_IMAGE, kind_path=kind_binary(), kubectl_path=kubectl
    )
    with pytest.MonkeyPatch.context() as env:
        if engine.name == "podman":
            env.setenv("KIND_EXPERIMENTAL_PROVIDER", "podman")
        try:
            kind.create()
            for name in scenarios.default_images():
                engine.run("tag", image.reference, name)
            archive = tmp_path_factory.mktemp("image") / "operator.tar"
            engine.run("save", "-o", str(archive), *scenarios.default_images(), timeout=300)
            subprocess.run(
                [str(kind.kind_path), "load", "image-archive", "--name", kind.name, archive],
                check=True,
            )
            yield Kind(cluster=kind, engine=engine)
        finally:
            kind.delete()
