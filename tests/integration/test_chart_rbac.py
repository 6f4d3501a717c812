"""The operator's Lease rights as the chart grants them, asked the way an administrator asks:
`kubectl auth can-i` run with the operator ServiceAccount's own token against the real API
server, and a real write attempt. The operator creates and watches the jobs' Leases, raises
token floors on each namespace's floors Lease and renews its own election Lease; it must not
be able to update or delete anyone else's Lease (the kube-system election Leases, the node
heartbeats in kube-node-lease, the jobs' Leases the replicas write). And the operator, run
as that ServiceAccount, doing the work that needs those rights."""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chart_helpers import Helm, Release, installed
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_helpers import GROUP, VERSION, StartOperator, apply_job, get_job, poll

from leasecron.coordination.floors import FLOORS_LEASE, tombstone_key
from leasecron.testing import Assets, ClusterAccess, ensure_assets

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def assets() -> Assets:
    return ensure_assets(names=("helm", "kubectl"))


@pytest.fixture(scope="module")
def helm(assets: Assets, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(binary=assets.binary("helm"), home=tmp_path_factory.mktemp("helm-home"))


@pytest.fixture
def system_leases(kube_api: client.ApiClient) -> Iterator[dict[str, str]]:
    """A Lease in kube-system and a node heartbeat Lease in kube-node-lease, as a cluster has
    them; {namespace: name}."""
    coordination = client.CoordinationV1Api(kube_api)
    leases = {"kube-system": f"kube-scheduler-{secrets.token_hex(3)}"}
    leases["kube-node-lease"] = f"node-{secrets.token_hex(3)}"
    for namespace, name in leases.items():
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1LeaseSpec(holder_identity="someone", lease_duration_seconds=40),
        )
        coordination.create_namespaced_lease(namespace=namespace, body=body)
    yield leases
    for namespace, name in leases.items():
        coordination.delete_namespaced_lease(name=name, namespace=namespace)


@pytest.fixture
def watched_namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A second fresh namespace for a namespaced install to watch, deleted after the test."""
    core = client.CoreV1Api(kube_api)
    name = f"t-chart-watched-{secrets.token_hex(3)}"
    core.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name=name, propagation_policy="Background")


class CanI:
    """`kubectl auth can-i` as one ServiceAccount, with a token minted for it."""

    def __init__(self, *, kubectl: Path, cluster: ClusterAccess, serviceaccount: str) -> None:
        namespace, _, name = serviceaccount.partition("/")
        token = cluster.mint_token(namespace=namespace, service_account=name)
        self.kubeconfig = cluster.kubeconfig_for_token(token=token, name=f"{namespace}-{name}")
        self.kubectl = kubectl

    def __call__(self, verb: str, target: str, *where: str) -> bool:
        completed = subprocess.run(
            [
                str(self.kubectl),
                "--kubeconfig",
                str(self.kubeconfig),
                "auth",
                "can-i",
                verb,
                target,
                *where,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        answer = completed.stdout.strip()
        assert answer in ("yes", "no"), f"kubectl auth can-i: {completed.stderr}"
        return answer == "yes"

    def wait_for(self, verb: str, target: str, *where: str) -> None:
        """Wait (bounded) until the authorizer has caught up with the new bindings."""
        deadline = time.monotonic() + 15
        while not self(verb, target, *where):
            assert time.monotonic() < deadline, f"never allowed: {verb} {target} {where}"
            time.sleep(0.1)


def _can_i(assets: Assets, cluster: ClusterAccess, release: Release) -> CanI:
    can_i = CanI(
        kubectl=assets.binary("kubectl"),
        cluster=cluster,
        serviceaccount=release.operator_serviceaccount,
    )
    can_i.wait_for("update", f"leases/{release.election_lease}", "-n", release.namespace)
    return can_i


LEASES = "leases.coordination.k8s.io"


def test_a_cluster_wide_operator_cannot_update_system_or_node_leases_but_can_do_its_work(
    helm: Helm,
    assets: Assets,
    controlplane: ClusterAccess,
    namespace: str,
    system_leases: dict[str, str],
) -> None:
    system, node = system_leases["kube-system"], system_leases["kube-node-lease"]
    with installed(helm, cluster=controlplane, namespace=namespace) as release:
        can_i = _can_i(assets, controlplane, release)
        election = f"{LEASES}/{release.election_lease}"

        # What it needs: its own election Lease, and creating and watching job Leases anywhere.
        assert can_i("update", election, "-n", namespace)
        assert can_i("get", election, "-n", namespace)
        assert can_i("create", LEASES, "-n", "team-a")
        assert can_i("watch", LEASES, "--all-namespaces")
        assert can_i("list", LEASES, "--all-namespaces")
        # Raising a token floor: a conditional replace of the namespace's floors Lease.
        assert can_i("update", f"{LEASES}/{FLOORS_LEASE}", "-n", "team-a")
        # What it must not do: write anybody's Lease but its own election Lease.
        for verb in ("update", "patch", "delete"):
            assert not can_i(verb, f"{LEASES}/{system}", "-n", "kube-system"), verb
            assert not can_i(verb, f"{LEASES}/{node}", "-n", "kube-node-lease"), verb
            assert not can_i(verb, f"{LEASES}/leasecron-job-nightly", "-n", "team-a"), verb
        assert not can_i("patch", election, "-n", namespace)
        assert not can_i("delete", election, "-n", namespace)
        assert not can_i("deletecollection", LEASES, "-n", "kube-system")

        # And a real write is refused by the API server.
        api = controlplane.client_for_serviceaccount(
            namespace=namespace, service_account=f"{release.name}-operator"
        )
        with api:
            coordination = client.CoordinationV1Api(api)
            lease = coordination.read_namespaced_lease(name=system, namespace="kube-system")
            lease.spec.holder_identity = "leasecron-operator"
            with pytest.raises(ApiException) as refused:
                coordination.replace_namespaced_lease(
                    name=system, namespace="kube-system", body=lease
                )
            assert refused.value.status == 403


def test_a_namespaced_operator_cannot_even_read_leases_outside_its_namespaces(
    helm: Helm,
    assets: Assets,
    controlplane: ClusterAccess,
    namespace: str,
    watched_namespace: str,
    system_leases: dict[str, str],
) -> None:
    watched = watched_namespace
    sets = [f"operator.namespaces={{{watched}}}"]
    with installed(helm, cluster=controlplane, namespace=namespace, sets=sets) as release:
        can_i = _can_i(assets, controlplane, release)

        assert can_i("create", LEASES, "-n", watched)
        assert can_i("watch", LEASES, "-n", watched)
        assert not can_i("update", LEASES, "-n", watched)
        assert not can_i("watch", LEASES, "--all-namespaces")
        for ns, name in system_leases.items():
            assert not can_i("get", f"{LEASES}/{name}", "-n", ns)
            assert not can_i("update", f"{LEASES}/{name}", "-n", ns)
        assert not can_i("create", LEASES, "-n", "kube-system")


FINALIZER = "leasecron.dev/token-floor"


def _floors(api: client.ApiClient, namespace: str) -> dict[str, str]:
    leases = client.CoordinationV1Api(api).list_namespaced_lease(namespace).items
    found = [x for x in leases if x.metadata.name == FLOORS_LEASE]
    return dict(found[0].metadata.annotations or {}) if found else {}


def test_the_operator_as_the_chart_runs_it_records_the_floors_of_two_jobs_deleted_together(
    kube_api: client.ApiClient, namespace: str, start_operator: StartOperator
) -> None:
    """Each single-owner job has a Lease of its own, whose token is recorded as a floor when
    the job is deleted. The first floor creates the floors Lease, the second updates it: both
    need the chart's RBAC (start_operator runs the operator as the chart's ServiceAccount)."""
    coordination = client.CoordinationV1Api(kube_api)
    tokens = {"first": 4, "second": 6}
    with start_operator() as operator:
        for job, token in tokens.items():
            apply_job(kube_api, namespace, job, bucket="single-owner")
            lease = poll(
                lambda job=job: next(
                    (
                        x
                        for x in coordination.list_namespaced_lease(namespace).items
                        if x.metadata.name == f"leasecron-job-{job}"
                    ),
                    None,
                ),
                timeout=10,
                what=f"the Lease of {job}",
            )
            lease.spec.lease_transitions = token  # claims no JobRun records
            coordination.replace_namespaced_lease(lease.metadata.name, namespace, lease)
            poll(
                lambda job=job: (
                    FINALIZER
                    in (get_job(kube_api, namespace, job)["metadata"].get("finalizers") or [])
                ),
                timeout=10,
                what=f"{job} held by the operator's finalizer",
            )
        jobs = client.CustomObjectsApi(kube_api)
        for job in tokens:
            jobs.delete_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", job)
        expected = {tombstone_key(job): str(token) for job, token in tokens.items()}
        recorded = poll(
            lambda: (floors := _floors(kube_api, namespace)) == expected and floors,
            timeout=15,
            what=f"both floors recorded: {expected}",
        )
        assert recorded == expected
        poll(
            lambda: (
                not jobs.list_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs")[
                    "items"
                ]
            ),
            timeout=10,
            what="both jobs gone",
        )
        log = operator.log_path.read_text()
    # \b403\b: a refused request, not the digits 403 inside a timestamp's microseconds
    assert "Forbidden" not in log and not re.search(r"\b403\b", log), log[-3000:]


def test_the_charts_runner_role_lets_a_person_run_suspend_resume_and_backfill_and_no_more(
    assets: Assets,
    helm: Helm,
    controlplane: ClusterAccess,
    kube_api: client.ApiClient,
    namespace: str,
    kubeconfig: Path,
    leasecron_crds: list[str],
) -> None:
    from click.testing import CliRunner

    from leasecron import Scheduler
    from leasecron.cli import main
    from leasecron.kube.clients import Kube
    from leasecron.runtime import Tuning
    from leasecron.testing import create_serviceaccount
    from leasecron.testing.handlers import CapturingHandler, scheduled_job

    create_serviceaccount(kube_api, namespace=namespace, name="oncall")
    sets = [
        "runner.createClusterRole=true",
        f"runner.namespaces={{{namespace}}}",
        "runner.subjects[0].kind=ServiceAccount",
        "runner.subjects[0].name=oncall",
    ]
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", scheduled_job("yearly", schedule="0 0 1 1 *")
    )
    capture = CapturingHandler()
    kube = Kube.from_config(kubeconfig=str(kubeconfig))
    replica = Scheduler(
        namespace=namespace, kube=kube, tuning=Tuning(member_duration_s=3), grace_period=5
    )
    replica.register("yearly", capture)
    with installed(helm, cluster=controlplane, namespace=namespace, sets=sets):
        can_i = CanI(
            kubectl=assets.binary("kubectl"),
            cluster=controlplane,
            serviceaccount=f"{namespace}/oncall",
        )
        can_i.wait_for("create", "jobruns.leasecron.dev", "-n", namespace)
        assert not can_i("update", LEASES, "-n", namespace)
        assert not can_i("patch", "jobruns.leasecron.dev", "-n", namespace)
        assert not can_i("delete", "scheduledjobs.leasecron.dev", "-n", namespace)
        assert not can_i("create", "jobruns.leasecron.dev", "-n", "default")

        def leasecron(*args: str) -> str:
            options = ["--kubeconfig", str(can_i.kubeconfig), "-n", namespace]
            result = CliRunner().invoke(main, [*args, *options])
            assert result.exit_code == 0, result.output
            return result.stdout

        replica.start()
        try:
            assert "scheduledjob/yearly suspended" in leasecron("suspend", "yearly")
            assert "scheduledjob/yearly resumed" in leasecron("resume", "yearly")
            ran = leasecron("run", "yearly", "--wait", "--timeout", "30")
            assert "Succeeded" in ran
            window = ("--from", "2025-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z")
            filled = leasecron("backfill", "yearly", *window, "--throttle", "0s")
            assert "2 tick(s) of yearly to run, 0 on record" in filled
        finally:
            replica.stop()
            kube.api_client.rest_client.close()
    assert capture.calls == 3
    user = f"system:serviceaccount:{namespace}:oncall"
    assert {ctx.job for ctx in capture.contexts} == {"yearly"}
    runs = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "jobruns"
    )["items"]
    assert sorted(r["spec"]["trigger"] for r in runs) == ["Backfill", "Backfill", "Manual"]
    assert {r["spec"]["requestedBy"] for r in runs} == {user}
