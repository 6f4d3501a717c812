"""Reading and overwriting a Lease as an administrator would, for the coordination modules."""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api

from leasecron.kube.clients import Kube


def lease_obj(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The Lease `name` as the API server returns it (raw JSON)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    return Kube(api, max_workers=1).request_sync("GET", path)


def take_over(api: ApiClient, namespace: str, name: str, *, holder: str, transitions: int) -> None:
    """Another writer takes the Lease `name`, as an admin with kubectl edit would."""
    leases = CoordinationV1Api(api)
    lease = leases.read_namespaced_lease(name, namespace)
    assert lease.spec is not None
    lease.spec.holder_identity = holder
    lease.spec.lease_transitions = transitions
    leases.replace_namespaced_lease(name, namespace, lease)
