"""Applying manifests to a test cluster: dicts or YAML files, with server-side apply (so
applying twice is harmless), and waiting for CustomResourceDefinitions to be Established
before anything that uses them is applied.

Owns `apply_manifests` and `apply_leasecron_crds`. Does not delete what it applied, and does
not wait for anything else to become ready (Deployments, webhooks).
"""

from __future__ import annotations

import copy
import importlib
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic

from leasecron.testing._processes import ControlPlaneError

Manifest = Mapping[str, Any]
FIELD_MANAGER = "leasecron-testing"


def load_manifests(source: Manifest | Path | str) -> list[dict[str, Any]]:
    """One dict, or every non-empty document of a YAML file (`Path` or path string)."""
    if isinstance(source, Mapping):
        return [copy.deepcopy(dict(source))]
    with Path(source).open() as stream:
        return [dict(doc) for doc in yaml.safe_load_all(stream) if doc]


def wait_crd_established(api: client.ApiClient, *, name: str, timeout: float = 30.0) -> None:
    """Return once CRD `name` has condition Established=True; ControlPlaneError on timeout."""
    extensions = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        crd = extensions.read_custom_resource_definition(name=name)
        conditions = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"CustomResourceDefinition {name} not Established after {timeout:.0f}s",
                component="kube-apiserver",
            )
        time.sleep(0.02)


def _apply_one(
    dyn: dynamic.DynamicClient, doc: dict[str, Any], *, namespace: str | None
) -> dict[str, Any]:
    resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    metadata = doc.setdefault("metadata", {})
    target_namespace = None
    if resource.namespaced:
        target_namespace = metadata.get("namespace") or namespace or "default"
        metadata["namespace"] = target_namespace
    applied = dyn.server_side_apply(  # type: ignore[no-untyped-call]
        resource,
        body=doc,
        name=metadata["name"],
        namespace=target_namespace,
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )
    result: dict[str, Any] = applied.to_dict()
    return result


def apply_manifests(
    api: client.ApiClient,
    sources: Iterable[Manifest | Path | str],
    *,
    namespace: str | None = None,
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Server-side apply every manifest in order and return the objects as the server stored
    them. Namespaced objects without a namespace go to `namespace` (default "default"). A
    CustomResourceDefinition is waited for until Established before the next manifest."""
    docs = [doc for source in sources for doc in load_manifests(source)]
    applied: list[dict[str, Any]] = []
    # The dynamic client caches discovery in a file keyed by host:port; ports get reused by
    # later clusters, so keep the cache private to this call.
    with tempfile.TemporaryDirectory(prefix="leasecron-discovery-") as cache:
        cache_file = str(Path(cache) / "discovery.json")
        dyn = dynamic.DynamicClient(api, cache_file=cache_file)  # type: ignore[no-untyped-call]
        for doc in docs:
            applied.append(_apply_one(dyn, doc, namespace=namespace))
            if doc["kind"] == "CustomResourceDefinition":
                wait_crd_established(api, name=doc["metadata"]["name"], timeout=timeout)
                dyn.resources.invalidate_cache()
    return applied


def leasecron_crds() -> list[dict[str, Any]]:
    """leasecron's own CRDs from `leasecron.operator.crds.all_crds()`, imported on first use."""
    try:
        module = importlib.import_module("leasecron.operator.crds")
    except ImportError as error:
        raise ControlPlaneError(
            "leasecron.operator.crds is not available in this build, so --crds cannot work",
            component="crds",
        ) from error
    documents: list[dict[str, Any]] = module.all_crds()
    return documents


def apply_leasecron_crds(api: client.ApiClient, *, timeout: float = 30.0) -> list[str]:
    """Apply leasecron's CRDs, wait until each is Established, and return their names."""
    applied = apply_manifests(api, leasecron_crds(), timeout=timeout)
    return [str(doc["metadata"]["name"]) for doc in applied]
