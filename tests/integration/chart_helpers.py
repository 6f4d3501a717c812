"""Helpers for the chart's integration tests: the real helm binary with its own homes, and
releases installed for the length of a `with` block.

On the session's shared cluster a release installs no CRDs (`crds.enabled=false`): a CRD can
belong to one release only, and the other tests install the CRDs themselves. The tests of the
chart's CRD templates run their own control plane (tests/integration/test_chart_crds.py).
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from leasecron.testing import KUBERNETES_VERSION, ClusterAccess, run_helm

CHART = Path(__file__).resolve().parents[2] / "charts" / "leasecron"
REPOSITORY_CRDS = Path(__file__).resolve().parents[2] / "crds"
NO_CRDS = ("crds.enabled=false",)


@dataclass(frozen=True, kw_only=True)
class Helm:
    """The helm binary with its own cache/config/data homes, so nothing of the user's leaks in."""

    binary: Path
    home: Path

    def run(
        self, *args: str, kubeconfig: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        completed = run_helm(self.binary, *args, home=self.home, kubeconfig=kubeconfig)
        if check and completed.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} exited {completed.returncode}:\n{completed.stderr}")
        return completed

    def template(
        self, *sets: str, namespace: str = "leasecron-system", crds: bool = False
    ) -> list[dict[str, Any]]:
        """`helm template` with `--set` pairs; every rendered object, the CRDs only when
        `crds` is true."""
        args = ["template", "leasecron", str(CHART), "--namespace", namespace]
        for pair in (*sets, *(() if crds else NO_CRDS)):
            args += ["--set", pair]
        rendered = self.run(*args, *self.offline).stdout
        return [doc for doc in yaml.safe_load_all(rendered) if doc]

    def refusal(self, *sets: str) -> str:
        """The error of a `helm template` that must fail with these `--set` pairs."""
        args = ["template", "leasecron", str(CHART)]
        for pair in sets:
            args += ["--set", pair]
        result = self.run(*args, *self.offline, check=False)
        assert result.returncode != 0, f"helm template accepted {sets}"
        return result.stderr

    @property
    def offline(self) -> tuple[str, ...]:
        """Flags for commands without a cluster: the Kubernetes version to render for (a helm
        built with `go install` otherwise assumes v1.20, below the chart's kubeVersion)."""
        return ("--kube-version", KUBERNETES_VERSION)


@dataclass(frozen=True, kw_only=True)
class Release:
    """An installed release of the chart: its name, namespace and fullname prefix."""

    name: str
    namespace: str

    @property
    def operator_serviceaccount(self) -> str:
        return f"{self.namespace}/{self.name}-operator"

    @property
    def election_lease(self) -> str:
        return f"{self.name}-operator"


def install(
    helm: Helm,
    *,
    kubeconfig: Path,
    namespace: str,
    sets: Sequence[str],
    chart: Path = CHART,
    crds: bool = False,
) -> Release:
    """`helm install` a uniquely named release; without the CRDs unless `crds`."""
    # The release name contains "leasecron", so it is also the prefix of every object name,
    # and is unique so cluster-scoped objects of concurrent releases never collide.
    release = Release(name=f"leasecron-{secrets.token_hex(3)}", namespace=namespace)
    args = ["install", release.name, str(chart), "--namespace", namespace]
    for pair in (*sets, *(() if crds else NO_CRDS)):
        args += ["--set", pair]
    helm.run(*args, kubeconfig=kubeconfig)
    return release


@contextlib.contextmanager
def installed(
    helm: Helm, *, cluster: ClusterAccess, namespace: str, sets: Sequence[str] = ()
) -> Iterator[Release]:
    """A release (without CRDs) installed for the duration of the `with` block."""
    release = install(helm, kubeconfig=cluster.kubeconfig, namespace=namespace, sets=sets)
    try:
        yield release
    finally:
        helm.run("uninstall", release.name, "-n", namespace, kubeconfig=cluster.kubeconfig)
