"""The Helm chart with the real helm binary: it lints, renders what each set of values asks
for, installs into a real API server (RBAC granting exactly what the operator and the
application pods need, checked with SubjectAccessReviews) and uninstalls. Releases here
install no CRDs (see chart_helpers); the CRD templates are tested in test_chart_crds.py and
test_chart_rendering.py.

There is no kubelet, so the operator's pods never start: these tests look at objects and
permissions, not at a running operator.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import click
import pytest
from chart_helpers import CHART, Helm, Release, install, installed
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasecron.cli import main
from leasecron.testing import Assets, ClusterAccess, ensure_assets

pytestmark = pytest.mark.integration

OPERATOR_CONCERNS = ("scheduledjobs", "leases", "events")
RECOMMENDED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


@pytest.fixture(scope="module")
def assets() -> Assets:
    return ensure_assets(names=("helm",))


@pytest.fixture(scope="module")
def helm(assets: Assets, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(binary=assets.binary("helm"), home=tmp_path_factory.mktemp("helm-home"))


def _find(objects: Sequence[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def _kinds(objects: Sequence[dict[str, Any]], kind: str) -> list[tuple[str, str]]:
    """(namespace, name) of every rendered object of `kind`, sorted."""
    return sorted(
        (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for o in objects
        if o["kind"] == kind
    )


def _container(objects: Sequence[dict[str, Any]]) -> dict[str, Any]:
    deployment = _find(objects, "Deployment", "leasecron-operator")
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return containers[0]


# -- helm lint and helm template ----------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("operator.namespaces={team-a,team-b}",),
        ("app.namespaces={billing}", "app.serviceAccounts[0].name=billing-api"),
        ("replicaCount=1", "prometheus.servicemonitor.enabled=true"),
        ("prometheus.prometheusRule.enabled=true", "crds.keep=false"),
    ],
    ids=["defaults", "namespaced", "app-rbac", "single-replica-servicemonitor", "rules"],
)
def test_helm_lint_passes_in_strict_mode(helm: Helm, sets: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for pair in sets:
        args += ["--set", pair]
    result = helm.run(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_default_rendering_runs_two_restricted_replicas_of_the_operator(helm: Helm) -> None:
    objects = helm.template()
    deployment = _find(objects, "Deployment", "leasecron-operator")
    pod = deployment["spec"]["template"]["spec"]
    container = _container(objects)

    assert deployment["spec"]["replicas"] == 2
    assert container["image"] == "leasecron/operator:0.1.0"
    assert container["command"] == ["leasecron", "operator"]
    assert container["args"] == [
        "--metrics-port=9090",
        "--health-port=8080",
        "--log-level=info",
        "--election-lease-name=leasecron-operator",
        "--election-lease-duration=15s",
        "--election-renew-deadline=10s",
        "--election-retry-period=2s",
    ]
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]} == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-healthz"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http-metrics": 9090,
        "http-healthz": 8080,
    }
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["serviceAccountName"] == "leasecron-operator"
    preferred = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_the_default_rendering_has_metrics_service_and_disruption_budget_but_no_monitor(
    helm: Helm,
) -> None:
    objects = helm.template()
    service = _find(objects, "Service", "leasecron-operator")
    budget = _find(objects, "PodDisruptionBudget", "leasecron-operator")

    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http-metrics", 9090)]
    assert budget["spec"]["minAvailable"] == 1
    assert _kinds(objects, "ServiceMonitor") == []


def test_every_rendered_object_carries_the_recommended_labels(helm: Helm) -> None:
    objects = helm.template("app.namespaces={billing}", "app.serviceAccounts[0].name=api")
    unlabelled = [
        f"{o['kind']}/{o['metadata']['name']}: {label}"
        for o in objects
        for label in RECOMMENDED_LABELS
        if label not in o["metadata"].get("labels", {})
    ]
    assert unlabelled == []
    assert {o["metadata"]["labels"]["app.kubernetes.io/version"] for o in objects} == {"0.1.0"}


@pytest.mark.parametrize(
    "sets",
    [(), ("operator.namespaces={team-a,team-b}", "operator.logLevel=debug")],
    ids=["defaults", "namespaced"],
)
def test_the_operator_command_line_accepts_the_rendered_arguments(
    helm: Helm, sets: tuple[str, ...]
) -> None:
    container = _container(helm.template(*sets))
    program, subcommand = container["command"]
    command = main.get_command(click.Context(main), subcommand)
    assert command is not None, f"leasecron has no subcommand {subcommand!r}"
    with command.make_context(subcommand, list(container["args"])) as context:
        params = context.params

    assert program == "leasecron"
    assert params["namespaces"] == tuple(
        arg.removeprefix("--namespace=")
        for arg in container["args"]
        if arg.startswith("--namespace=")
    )
    assert params["election_lease_name"] == "leasecron-operator"


def test_by_default_the_operator_is_bound_cluster_wide_and_may_list_namespaces(
    helm: Helm,
) -> None:
    objects = helm.template()
    discovery = _find(objects, "ClusterRole", "leasecron-operator-discovery")

    assert _kinds(objects, "ClusterRoleBinding") == sorted(
        ("", f"leasecron-operator-{concern}") for concern in (*OPERATOR_CONCERNS, "discovery")
    )
    assert _kinds(objects, "RoleBinding") == [("leasecron-system", "leasecron-operator-election")]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in (
        discovery["rules"]
    )


def test_a_namespace_list_binds_the_operator_only_in_those_namespaces(helm: Helm) -> None:
    objects = helm.template("operator.namespaces={team-a,team-b}")
    discovery = _find(objects, "ClusterRole", "leasecron-operator-discovery")

    assert _kinds(objects, "ClusterRoleBinding") == [("", "leasecron-operator-discovery")]
    assert _kinds(objects, "RoleBinding") == sorted(
        [("leasecron-system", "leasecron-operator-election")]
        + [
            (namespace, f"leasecron-operator-{concern}")
            for namespace in ("team-a", "team-b")
            for concern in OPERATOR_CONCERNS
        ]
    )
    assert all("namespaces" not in rule["resources"] for rule in discovery["rules"])
    assert _container(objects)["args"][:2] == ["--namespace=team-a", "--namespace=team-b"]


def test_the_election_role_names_its_lease(helm: Helm) -> None:
    objects = helm.template("operator.election.leaseName=my-election")
    role = _find(objects, "Role", "leasecron-operator-election")

    assert role["rules"][0]["resourceNames"] == ["my-election"]
    assert "--election-lease-name=my-election" in _container(objects)["args"]


def test_app_service_accounts_are_bound_in_their_namespaces_only(helm: Helm) -> None:
    objects = helm.template(
        "app.namespaces={billing,shop}",
        "app.serviceAccounts[0].name=worker",
        "app.serviceAccounts[1].name=billing-api",
        "app.serviceAccounts[1].namespace=billing",
    )
    bindings = {
        o["metadata"]["namespace"]: sorted((s["namespace"], s["name"]) for s in o["subjects"])
        for o in objects
        if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "leasecron-app"
    }

    assert bindings == {
        "billing": [("billing", "billing-api"), ("billing", "worker")],
        "shop": [("shop", "worker")],
    }
    assert _kinds(objects, "ClusterRole").count(("", "leasecron-app")) == 1


def test_an_app_service_account_outside_app_namespaces_is_refused(helm: Helm) -> None:
    result = helm.run(
        "template",
        "leasecron",
        str(CHART),
        "--set",
        "app.namespaces={billing}",
        "--set",
        "app.serviceAccounts[0].name=api",
        "--set",
        "app.serviceAccounts[0].namespace=shop",
        *helm.offline,
        check=False,
    )
    assert result.returncode != 0
    assert 'namespace "shop" is not in app.namespaces' in result.stderr


def test_helm_refuses_a_value_the_schema_does_not_know(helm: Helm) -> None:
    result = helm.run(
        "template", "leasecron", str(CHART), "--set", "replicas=3", *helm.offline, check=False
    )
    assert result.returncode != 0
    assert "replicas" in result.stderr
    assert "additional properties" in result.stderr.lower()


def test_one_replica_renders_no_disruption_budget_and_a_monitor_when_asked(helm: Helm) -> None:
    objects = helm.template("replicaCount=1", "prometheus.servicemonitor.enabled=true")
    monitor = _find(objects, "ServiceMonitor", "leasecron-operator")

    assert _kinds(objects, "PodDisruptionBudget") == []
    assert monitor["spec"]["endpoints"][0]["port"] == "http-metrics"


def test_a_digest_pins_the_image(helm: Helm) -> None:
    digest = "sha256:" + "ab" * 32
    objects = helm.template(f"image.digest={digest}")

    assert _container(objects)["image"] == f"leasecron/operator:0.1.0@{digest}"


def _pod_from_template(objects: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
    template = _find(objects, "Deployment", "leasecron-operator")["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
        "spec": copy.deepcopy(template["spec"]),
    }


def _pod_security_refusal(api: client.ApiClient, namespace: str, pod: dict[str, Any]) -> str:
    """Server-side dry-run create of `pod`: the PodSecurity admission's refusal, "" if admitted."""
    try:
        # The client sends a plain dict as it is; the typed signature asks for a V1Pod.
        body = cast(client.V1Pod, pod)
        client.CoreV1Api(api).create_namespaced_pod(namespace=namespace, body=body, dry_run="All")
    except ApiException as error:
        if error.status == 403 and "violates PodSecurity" in str(error.body):
            return str(error.body)
        raise
    return ""


def test_the_operator_pod_is_admitted_under_the_restricted_pod_security_standard(
    helm: Helm, kube_api: client.ApiClient, namespace: str
) -> None:
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    client.CoreV1Api(kube_api).patch_namespace(
        name=namespace, body={"metadata": {"labels": labels}}
    )
    objects = helm.template()
    privileged = _pod_from_template(objects, "privileged")
    privileged["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    deadline = time.monotonic() + 15  # the admission reads namespace labels from a cache
    while not _pod_security_refusal(kube_api, namespace, privileged):
        assert time.monotonic() < deadline, "the restricted level is not enforced"
        time.sleep(0.05)

    assert _pod_security_refusal(kube_api, namespace, _pod_from_template(objects, "ours")) == ""


# -- helm install on the real API server --------------------------------------------------


@dataclass(frozen=True)
class Access:
    """One request to authorize: a verb on a resource (and subresource, name) in a namespace."""

    verb: str
    resource: str
    namespace: str = ""
    group: str = ""
    subresource: str = ""
    name: str = ""

    def __str__(self) -> str:
        target = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            target += f".{self.group}"
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {target}{named}{where}"


def _allowed(api: client.ApiClient, *, serviceaccount: str, access: Access) -> bool:
    namespace, _, name = serviceaccount.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{name}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=access.namespace or None,
                group=access.group,
                resource=access.resource,
                subresource=access.subresource or None,
                verb=access.verb,
                name=access.name or None,
            ),
        )
    )
    result = client.AuthorizationV1Api(api).create_subject_access_review(body=review)
    return bool(result.status is not None and result.status.allowed)


def _assert_access(
    api: client.ApiClient, *, serviceaccount: str, expected: dict[Access, bool]
) -> None:
    """Compare what the authorizer answers with `expected`; the RBAC cache lags writes by a
    few milliseconds, so wait (bounded) until every expected grant is visible first."""
    deadline = time.monotonic() + 15
    grants = [access for access, allowed in expected.items() if allowed]
    while not all(_allowed(api, serviceaccount=serviceaccount, access=a) for a in grants):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    actual = {
        str(access): _allowed(api, serviceaccount=serviceaccount, access=access)
        for access in expected
    }
    assert actual == {str(access): allowed for access, allowed in expected.items()}


def _leases(verb: str, namespace: str, name: str = "") -> Access:
    return Access(verb, "leases", namespace, group="coordination.k8s.io", name=name)


def _leasecron(verb: str, resource: str, namespace: str, subresource: str = "") -> Access:
    return Access(verb, resource, namespace, group="leasecron.dev", subresource=subresource)


@pytest.fixture
def other_namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A second fresh namespace, deleted after the test."""
    core = client.CoreV1Api(kube_api)
    name = f"t-chart-other-{secrets.token_hex(3)}"
    core.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name=name, propagation_policy="Background")


def _app_sets(namespace: str) -> list[str]:
    """Values binding the app ClusterRole to ServiceAccount `app` in `namespace` only."""
    return [f"app.namespaces={{{namespace}}}", "app.serviceAccounts[0].name=app"]


def _exists(read: Any, **kwargs: str) -> bool:
    try:
        read(**kwargs)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _release_objects(api: client.ApiClient, release: Release) -> dict[str, bool]:
    """Whether each object a default install creates exists, keyed by kind/name."""
    apps, core, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    ns, operator = release.namespace, f"{release.name}-operator"
    checks: dict[str, tuple[Any, dict[str, str]]] = {
        f"Deployment/{operator}": (apps.read_namespaced_deployment, {"namespace": ns}),
        f"ServiceAccount/{operator}": (core.read_namespaced_service_account, {"namespace": ns}),
        f"Service/{operator}": (core.read_namespaced_service, {"namespace": ns}),
        f"PodDisruptionBudget/{operator}": (
            policy.read_namespaced_pod_disruption_budget,
            {"namespace": ns},
        ),
        f"Role/{operator}-election": (rbac.read_namespaced_role, {"namespace": ns}),
        f"RoleBinding/{release.name}-app": (rbac.read_namespaced_role_binding, {"namespace": ns}),
        f"ClusterRole/{release.name}-app": (rbac.read_cluster_role, {}),
    }
    for concern in (*OPERATOR_CONCERNS, "discovery"):
        checks[f"ClusterRole/{operator}-{concern}"] = (rbac.read_cluster_role, {})
        checks[f"ClusterRoleBinding/{operator}-{concern}"] = (rbac.read_cluster_role_binding, {})
    return {
        key: _exists(read, name=key.partition("/")[2], **kwargs)
        for key, (read, kwargs) in checks.items()
    }


def test_helm_install_creates_every_object_and_uninstall_removes_them(
    helm: Helm, controlplane: ClusterAccess, kube_api: client.ApiClient, namespace: str
) -> None:
    release = install(
        helm,
        kubeconfig=controlplane.kubeconfig,
        namespace=namespace,
        sets=_app_sets(namespace),
    )
    created = _release_objects(kube_api, release)
    assert created == dict.fromkeys(created, True)

    helm.run(
        "uninstall", release.name, "--namespace", namespace, kubeconfig=controlplane.kubeconfig
    )

    remaining = _release_objects(kube_api, release)
    assert remaining == dict.fromkeys(remaining, False)


def test_a_cluster_wide_install_lets_the_operator_keep_status_everywhere_but_not_write_leases(
    helm: Helm, controlplane: ClusterAccess, kube_api: client.ApiClient, namespace: str
) -> None:
    elsewhere = f"{namespace}-elsewhere"
    with installed(helm, cluster=controlplane, namespace=namespace) as release:
        _assert_access(
            kube_api,
            serviceaccount=release.operator_serviceaccount,
            expected={
                _leasecron("patch", "scheduledjobs", namespace, "status"): True,
                _leasecron("patch", "scheduledjobs", elsewhere, "status"): True,
                _leasecron("watch", "scheduledjobs", elsewhere): True,
                _leasecron("delete", "jobruns", elsewhere): True,
                _leases("watch", elsewhere): True,
                _leases("create", elsewhere): True,
                _leases("update", elsewhere): False,
                _leases("patch", elsewhere): False,
                _leases("delete", namespace): False,
                _leases("update", namespace, release.election_lease): True,
                _leases("update", namespace, "leasecron-job-someone-elses"): False,
                Access("create", "events", elsewhere): True,
                Access("create", "events", elsewhere, group="events.k8s.io"): False,
                _leases("update", elsewhere, "leasecron-token-floors"): True,
                Access("watch", "namespaces"): True,
                Access("list", "customresourcedefinitions", group="apiextensions.k8s.io"): True,
                _leasecron("delete", "scheduledjobs", namespace): False,
                _leasecron("create", "scheduledjobs", namespace): False,
                Access("get", "secrets", namespace): False,
                Access("create", "pods", namespace): False,
            },
        )


def test_a_namespaced_install_gives_the_operator_no_rights_outside_its_namespaces(
    helm: Helm,
    controlplane: ClusterAccess,
    kube_api: client.ApiClient,
    namespace: str,
    other_namespace: str,
) -> None:
    watched = other_namespace
    sets = [f"operator.namespaces={{{watched}}}"]
    with installed(helm, cluster=controlplane, namespace=namespace, sets=sets) as release:
        election = f"{release.name}-operator"
        _assert_access(
            kube_api,
            serviceaccount=release.operator_serviceaccount,
            expected={
                _leasecron("patch", "scheduledjobs", watched, "status"): True,
                _leases("create", watched): True,
                _leases("watch", watched): True,
                _leases("update", watched): False,
                _leases("update", namespace, election): True,
                _leases("patch", namespace, election): False,
                _leases("get", namespace, election): True,
                _leases("watch", namespace, election): True,
                _leases("create", namespace): True,
                Access("watch", "customresourcedefinitions", group="apiextensions.k8s.io"): True,
                _leases("update", namespace, "leasecron-job-someone-elses"): False,
                _leases("list", namespace): False,
                _leases("update", f"{namespace}-elsewhere"): False,
                _leasecron("patch", "scheduledjobs", namespace, "status"): False,
                _leasecron("patch", "scheduledjobs", f"{namespace}-elsewhere", "status"): False,
                Access("list", "namespaces"): False,
            },
        )


def test_the_app_service_account_may_run_jobs_only_in_the_listed_namespaces(
    helm: Helm, controlplane: ClusterAccess, kube_api: client.ApiClient, namespace: str
) -> None:
    unlisted = f"{namespace}-unlisted"
    with installed(helm, cluster=controlplane, namespace=namespace, sets=_app_sets(namespace)):
        _assert_access(
            kube_api,
            serviceaccount=f"{namespace}/app",
            expected={
                _leasecron("watch", "scheduledjobs", namespace): True,
                _leasecron("create", "jobruns", namespace): True,
                _leasecron("patch", "jobruns", namespace, "status"): True,
                _leases("create", namespace): True,
                _leases("update", namespace): True,
                Access("create", "events", namespace): True,
                _leasecron("delete", "scheduledjobs", namespace): False,
                _leasecron("patch", "scheduledjobs", namespace, "status"): False,
                _leasecron("delete", "jobruns", namespace): False,
                _leases("get", unlisted): False,
                _leases("update", unlisted): False,
                _leases("create", unlisted): False,
                _leasecron("create", "jobruns", unlisted): False,
            },
        )
