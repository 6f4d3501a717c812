"""The real-pod tests, shared by every cluster fixture: a module that defines a module-scoped
`cluster` fixture (something with `_scenarios.Cluster`'s methods, its admin `kubeconfig` and
`kill_container`, the operator image of the commit under test in it under the names the
chart's default values and the example app use) imports these and gets the scenarios of
e2e/_scenarios.py run on it: e2e/test_real_pods.py (a NodeCluster here) and e2e/test_kind.py
(kind). They run on one cluster in the order of their numbers (pytest sorts imported tests by
name), the install guide's way in first; each leaves the app at its 3 replicas and the jobs as the
example defines them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import _scenarios as scenarios
from leasecron.testing import find_assets, poll

__all__ = [
    "installed",
    "test_1_the_readme_way_in_runs_two_operators_one_leading_and_every_tick_once",
    "test_2_two_jobs_deleted_together_keep_their_floors_and_continue_above_their_tokens",
    "test_3_a_rolling_update_of_the_app_runs_no_tick_twice_and_never_two_owners",
    "test_4_scaling_the_app_3_1_5_runs_no_tick_twice_and_the_new_replicas_take_work",
    "test_5_a_deleted_holder_pod_hands_its_job_over_before_its_grant_ends",
    "test_6_a_killed_holder_is_taken_over_once_its_grant_expired",
    "test_7_the_operator_survives_its_leader_deleted_and_a_helm_upgrade_without_false_alarms",
    "test_8_the_operator_probes_and_metrics_service_answer_from_inside_the_cluster",
]


@pytest.fixture(scope="module")
def installed(cluster: scenarios.Cluster) -> Iterator[scenarios.RunLog]:
    """The install guide's way in done once; the example app's lines followed from then on."""
    started = time.monotonic()
    kubectl = [str(find_assets().binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    with scenarios.RunLog(cluster=cluster, kubectl=kubectl) as log:
        scenarios.install_the_readme_way(cluster)
        print(f"installed the install guide's way in {time.monotonic() - started:.1f} s")
        yield log


def test_1_the_readme_way_in_runs_two_operators_one_leading_and_every_tick_once(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    leader = scenarios.assert_one_operator_leads_without_restarts(cluster)
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
            cluster, installed, job, since=first, until=last
        )
        assert len(runs) >= 6, runs  # most ticks ran (a loaded machine may miss one)
    # The operator's replicas never restarted meanwhile, and the same one leads.
    assert scenarios.assert_one_operator_leads_without_restarts(cluster) == leader


def test_2_two_jobs_deleted_together_keep_their_floors_and_continue_above_their_tokens(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    tokens = scenarios.delete_and_apply_two_jobs_again(cluster)
    print(f"tokens (last before deletion, first after): {tokens}")


def test_3_a_rolling_update_of_the_app_runs_no_tick_twice_and_never_two_owners(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    started = time.monotonic()
    figures = scenarios.rolling_update(cluster, installed)
    print(f"rolling update: {figures} in {time.monotonic() - started:.1f} s")


def test_4_scaling_the_app_3_1_5_runs_no_tick_twice_and_the_new_replicas_take_work(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    started = time.monotonic()
    figures = scenarios.scaling(cluster, installed)
    print(f"scaling 3 -> 1 -> 5: {figures} in {time.monotonic() - started:.1f} s")


def test_5_a_deleted_holder_pod_hands_its_job_over_before_its_grant_ends(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    figures = scenarios.handover_on_delete(cluster)
    print(f"handover after kubectl delete pod: {figures}")


def test_6_a_killed_holder_is_taken_over_once_its_grant_expired(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    figures = scenarios.takeover_on_kill(cluster, installed, cluster.kill_container)
    print(f"takeover after SIGKILL: {figures}")


def test_7_the_operator_survives_its_leader_deleted_and_a_helm_upgrade_without_false_alarms(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    figures = scenarios.operator_handover(cluster, installed)
    print(f"operator: {figures}")


def test_8_the_operator_probes_and_metrics_service_answer_from_inside_the_cluster(
    cluster: scenarios.Cluster, installed: scenarios.RunLog
) -> None:
    statuses = scenarios.scrape_from_inside(cluster)
    print(f"scraped from an app pod: {statuses}")
