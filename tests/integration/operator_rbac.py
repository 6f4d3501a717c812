"""The operator's credentials in the integration tests: the chart's own ServiceAccount and
RBAC, never the admin's. `chart_operator_kubeconfig` renders the chart (helm template, the
operator watching the test's namespace, its election Lease there), applies the rendered
ServiceAccount, ClusterRoles, Roles and bindings, waits until the authorizer serves them, and
writes a kubeconfig holding a TokenRequest token of that ServiceAccount.

So an operator write the chart does not grant fails a test here, as it would fail on a
cluster. The cluster-scoped objects (ClusterRoles, the discovery ClusterRoleBinding) carry a
release name of their own and are deleted on exit; the namespaced ones go with the namespace.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from chart_helpers import CHART, NO_CRDS
from kubernetes import client, config, dynamic

from leasecron.testing import KUBERNETES_VERSION, find_assets, poll, run_helm, write_kubeconfig

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding")


def render_operator_rbac(
    *, release: str, namespace: str, election_lease: str, home: Path
) -> list[dict[str, Any]]:
    """The chart's ServiceAccounts and RBAC for an operator watching only `namespace`, its
    election Lease `election_lease` in `namespace` (the release namespace)."""
    sets = [
        *NO_CRDS,
        f"operator.namespaces={{{namespace}}}",
        f"operator.election.leaseName={election_lease}",
        "app.createClusterRole=false",
    ]
    args = ["template", release, str(CHART), "-n", namespace, "--kube-version"]
    args += [KUBERNETES_VERSION, *[x for pair in sets for x in ("--set", pair)]]
    completed = run_helm(find_assets().binary("helm"), *args, home=home)
    if completed.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}:\n{completed.stderr}")
    documents = [doc for doc in yaml.safe_load_all(completed.stdout) if doc]
    return [doc for doc in documents if doc["kind"] in RBAC_KINDS]


def _allowed(api: client.ApiClient, user: str, namespace: str, lease: str) -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            resource_attributes=client.V1ResourceAttributes(
                group="coordination.k8s.io",
                resource="leases",
                verb="update",
                namespace=namespace,
                name=lease,
            ),
        )
    )
    result = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(result.status is not None and result.status.allowed)


def _token_kubeconfig(admin: Path, token: str, path: Path) -> Path:
    """A kubeconfig for `token`, with the server and CA of `admin`'s current context."""
    document = yaml.safe_load(admin.read_text())
    contexts = {c["name"]: c["context"] for c in document["contexts"]}
    context = contexts[document["current-context"]]
    cluster = next(c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"])
    ca = cluster.get("certificate-authority-data")
    if ca is None and cluster.get("certificate-authority"):
        ca_pem: bytes | None = Path(cluster["certificate-authority"]).read_bytes()
    else:
        ca_pem = None if ca is None else base64.b64decode(ca)
    return write_kubeconfig(
        path,
        server=cluster["server"],
        ca_pem=ca_pem,
        user={"token": token},
        verify_tls=not cluster.get("insecure-skip-tls-verify", False),
    )


@contextlib.contextmanager
def chart_operator_kubeconfig(
    admin: Path, namespace: str, directory: Path, *, election_lease: str
) -> Iterator[Path]:
    """A kubeconfig for the chart's operator ServiceAccount in `namespace`, with exactly the
    chart's RBAC applied (see module doc); the cluster-scoped part is removed on exit."""
    release = f"lc-{secrets.token_hex(3)}"
    objects = render_operator_rbac(
        release=release, namespace=namespace, election_lease=election_lease, home=directory / "helm"
    )
    accounts = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    assert len(accounts) == 1, f"the chart renders one operator ServiceAccount, not {accounts}"
    api = config.new_client_from_config(config_file=str(admin))
    created: list[dict[str, Any]] = []
    try:
        dyn = dynamic.DynamicClient(api)
        for doc in objects:
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            scoped = doc["kind"] in CLUSTER_SCOPED
            resource.create(body=doc, namespace=None if scoped else namespace)
            if scoped:
                created.append(doc)
        user = f"system:serviceaccount:{namespace}:{accounts[0]}"
        poll(
            lambda: _allowed(api, user, namespace, election_lease),
            timeout=15,
            what=f"the chart's RBAC served for {user}",
        )
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        answer = client.CoreV1Api(api).create_namespaced_service_account_token(
            name=accounts[0], namespace=namespace, body=request
        )
        yield _token_kubeconfig(admin, answer.status.token, directory / f"{release}.kubeconfig")
    finally:
        dyn = dynamic.DynamicClient(api)
        for doc in reversed(created):
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            with contextlib.suppress(client.exceptions.ApiException):
                resource.delete(name=doc["metadata"]["name"])
        api.close()
