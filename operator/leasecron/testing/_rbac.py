"""ServiceAccounts with a namespaced Role for tests: create the ServiceAccount, a Role with the
given rules and the RoleBinding between them, then wait until the API server's authorizer
actually allows what the rules say (RBAC is served from a cache that lags writes by a few
milliseconds; a test that used the token at once could see a spurious 403).

Owns `create_serviceaccount`. Does not delete what it creates: the
namespace's deletion takes it away.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasecron.testing._processes import ControlPlaneError

PolicyRule = Mapping[str, Sequence[str]]
"""One RBAC rule as in a Role manifest, e.g.
`{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}`."""

_WILDCARD_STANDINS = {"apiGroups": "", "resources": "anything", "verbs": "get"}


def _create(call: Callable[..., object], **kwargs: object) -> None:
    """Create, treating AlreadyExists as success (so a factory can be called twice)."""
    try:
        call(**kwargs)
    except ApiException as error:
        if error.status != 409:
            raise


def _first(rule: PolicyRule, key: str) -> str:
    """The rule's first value for `key`, a concrete stand-in for `*`, "" when absent."""
    values = list(rule.get(key) or [""])
    return _WILDCARD_STANDINS.get(key, "") if values[0] == "*" else values[0]


def _allowed(api: client.ApiClient, *, user: str, namespace: str, rule: PolicyRule) -> bool:
    """Whether the authorizer lets `user` do the first verb on the first resource of `rule`."""
    resource, _, subresource = _first(rule, "resources").partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace,
                group=_first(rule, "apiGroups"),
                resource=resource,
                subresource=subresource or None,
                verb=_first(rule, "verbs"),
                name=_first(rule, "resourceNames") or None,
            ),
        )
    )
    result = client.AuthorizationV1Api(api).create_subject_access_review(body=review)
    return result.status is not None and bool(result.status.allowed)


def create_serviceaccount(
    api: client.ApiClient,
    *,
    namespace: str,
    name: str,
    rules: Sequence[PolicyRule] | None = None,
    timeout: float = 10.0,
) -> None:
    """Create ServiceAccount `name` in `namespace`, and, when `rules` are given, a Role and a
    RoleBinding (both named `name`) granting them; return once the authorizer honours them."""
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    metadata = client.V1ObjectMeta(name=name, namespace=namespace)
    _create(
        core.create_namespaced_service_account,
        namespace=namespace,
        body=client.V1ServiceAccount(metadata=metadata),
    )
    if not rules:
        return
    plain = [{key: list(values) for key, values in rule.items()} for rule in rules]
    _create(
        rbac.create_namespaced_role,
        namespace=namespace,
        body={"metadata": {"name": name, "namespace": namespace}, "rules": plain},
    )
    _create(
        rbac.create_namespaced_role_binding,
        namespace=namespace,
        body={
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    user = f"system:serviceaccount:{namespace}:{name}"
    deadline = time.monotonic() + timeout
    pending: list[PolicyRule] = list(plain)
    while pending:
        pending = [r for r in pending if not _allowed(api, user=user, namespace=namespace, rule=r)]
        if pending and time.monotonic() > deadline:
            raise ControlPlaneError(
                f"RBAC for {user} not effective after {timeout:.0f}s: {pending}",
                component="kube-apiserver",
            )
        if pending:
            time.sleep(0.02)
