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
from datetime import UTC, datetime

import pytest

import _scenarios as scenarios
from _containers import ROOT
from _operator_image import operator_image
from leasecron.testing import NodeCluster, find_assets, missing_node_prerequisites, poll

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CANNOT_EXIST = ("root", "Linux", "host tools", "CNI plugins", "overlay", "cgroups")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
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


@pytest.fixture(scope="module")
def installed(node: NodeCluster) -> Iterator[scenarios.RunLog]:
    """The README's way in done once; the example app's lines followed from then on."""
    started = time.monotonic()
    kubectl = [str(find_assets().binary("kubectl")), "--kubeconfig", str(node.kubeconfig)]
    with scenarios.RunLog(cluster=node, kubectl=kubectl) as log:
        scenarios.install_the_readme_way(node)
        print(f"installed the README's way in {time.monotonic() - started:.1f} s")
        yield log


def test_the_readme_way_in_runs_two_operators_one_leading_and_every_tick_once(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    leader = scenarios.assert_one_operator_leads_without_restarts(node)
    since = datetime.now(UTC)
    for job in scenarios.once_per_tick_jobs():
        step = scenarios.schedule_step(job)
        first = scenarios.tick_floor(since, step)
        last = first + 8 * step
        poll(
            lambda job=job, last=last: any(t >= last for t in installed.ticks(job)),
            timeout=60,
            what=f"{job} run up to {last}",
        )
        runs = scenarios.assert_every_tick_ran_once_or_was_alarmed(
            node, installed, job, since=first, until=last
        )
        assert len(runs) >= 6, runs  # most ticks ran (a loaded machine may miss one)
    # The operator's replicas never restarted meanwhile, and the same one leads.
    assert scenarios.assert_one_operator_leads_without_restarts(node) == leader


def test_two_jobs_deleted_together_keep_their_floors_and_continue_above_their_tokens(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    tokens = scenarios.delete_and_apply_two_jobs_again(node)
    print(f"tokens (last before deletion, first after): {tokens}")


def test_a_rolling_update_of_the_app_runs_no_tick_twice_and_never_two_owners(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    started = time.monotonic()
    figures = scenarios.rolling_update(node, installed)
    print(f"rolling update: {figures} in {time.monotonic() - started:.1f} s")


def test_scaling_the_app_3_1_5_runs_no_tick_twice_and_the_new_replicas_take_work(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    started = time.monotonic()
    figures = scenarios.scaling(node, installed)
    print(f"scaling 3 -> 1 -> 5: {figures} in {time.monotonic() - started:.1f} s")


def test_a_deleted_holder_pod_hands_its_job_over_before_its_grant_ends(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    figures = scenarios.handover_on_delete(node)
    print(f"handover after kubectl delete pod: {figures}")


def test_a_killed_holder_is_taken_over_once_its_grant_expired(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    figures = scenarios.takeover_on_kill(node, node.kill_container)
    print(f"takeover after SIGKILL: {figures}")


def test_the_operator_survives_its_leader_deleted_and_a_helm_upgrade_without_false_alarms(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    figures = scenarios.operator_handover(node, installed)
    print(f"operator: {figures}")


def test_the_operator_probes_and_metrics_service_answer_from_inside_the_cluster(
    node: NodeCluster, installed: scenarios.RunLog
) -> None:
    statuses = scenarios.scrape_from_inside(node)
    print(f"scraped from an app pod: {statuses}")
