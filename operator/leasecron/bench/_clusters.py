"""Where a benchmark runs: the cluster of $KUBECONFIG when it is set, else a throwaway local
control plane; and a namespace of its own, removed afterwards.

It does not install CRDs (the election and tick benchmarks only use Leases) and does not wait
for the namespace's deletion to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
from collections.abc import Iterator

from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError


def progress(message: str) -> None:
    """A progress line on stderr (stdout carries the table and the JSON)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def cluster(kubeconfig: str | None = None) -> Iterator[str]:
    """The kubeconfig path to use: `kubeconfig`, else $KUBECONFIG, else a local control plane
    started now and stopped on exit."""
    given = kubeconfig or os.environ.get("KUBECONFIG")
    if given:
        progress(f"using the cluster of {given}")
        yield given
        return
    from leasecron.testing import ControlPlane

    progress("starting a local control plane (KUBECONFIG is not set)")
    with ControlPlane(controller_manager=False) as plane:
        progress(f"control plane {plane.version} ready in {plane.startup_seconds:.1f}s")
        yield str(plane.kubeconfig)


async def _create_namespace(kubeconfig: str, name: str) -> None:
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=1)
    try:
        await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    finally:
        await kube.close()


async def _delete_namespace(kubeconfig: str, name: str) -> None:
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=1)
    try:
        await kube.request("DELETE", f"/api/v1/namespaces/{name}")
    except KubeError as e:
        progress(f"could not delete namespace {name}: {e.message}")
    finally:
        await kube.close()


@contextlib.contextmanager
def bench_namespace(kubeconfig: str, *, prefix: str) -> Iterator[str]:
    """A fresh namespace `<prefix>-<random>` for one benchmark run, deleted afterwards."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    asyncio.run(_create_namespace(kubeconfig, name))
    try:
        yield name
    finally:
        asyncio.run(_delete_namespace(kubeconfig, name))
