"""The chart, the operator and the example app as pods on a real kubelet: a
`leasecron.testing.NodeCluster` (kubelet, containerd, kube-scheduler, kube-proxy and the
control plane, in namespaces of its own), one per module, with the operator image of the
commit under test built (`make image`) and imported under the names the chart's default
values and the example app use. The scenarios are e2e/_scenarios.py's.

Part of `make test`. Skips, naming what is missing, only where a node cannot run at all (not
root, no namespaces or cgroups, no runc or CNI plugins, no container engine to build the
image); the node's binaries are built when missing (e2e/node/build.sh).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

import _scenarios as scenarios
from _containers import ROOT
from _operator_image import operator_image
from _real_pod_tests import *  # noqa: F403 (the shared tests, run on this module's cluster)
from leasecron.testing import NodeCluster, ensure_assets, missing_node_prerequisites

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# What a test run cannot build for itself: only these make the tests skip.
CANNOT_EXIST = ("root", "a NodeCluster needs Linux", "host tools", "the CNI plugins", "the overlay")
CANNOT_EXIST += ("cgroups",)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    ensure_assets()  # the control plane, built when missing
    missing = missing_node_prerequisites()
    if any("node binaries" in m for m in missing):
        subprocess.run(["bash", str(ROOT / "e2e" / "node" / "build.sh")], check=True)
        missing = missing_node_prerequisites()
    if missing:
        assert all(m.startswith(CANNOT_EXIST) for m in missing), missing
        pytest.skip("a real node cannot run here: " + "; ".join(missing))
    image = operator_image()
    if isinstance(image, str):
        pytest.skip(f"no operator image can be built here: {image}")
    archive = image.save_archive(tmp_path_factory.mktemp("image") / "operator.tar")
    started = time.monotonic()
    with NodeCluster() as cluster:
        print(f"node Ready in {cluster.startup_seconds:.1f} s")
        cluster.load_image(archive, also_as=scenarios.default_images())
        print(f"node Ready and image imported in {time.monotonic() - started:.1f} s")
        yield cluster
    assert not cluster.leftovers()
