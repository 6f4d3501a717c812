"""Public test helpers: a throwaway local control plane, a real single-node cluster where pods
run (`NodeCluster`: your application's image on a kubelet), child processes that speak JSON lines
(`ChildProcess`: a replica of your app under test), real PostgreSQL and Redis servers for the
stores your handlers write (`postgres_server()`, `redis_server()`), and pytest fixtures for
all of them (`leasecron.testing.pytest_plugin`, enabled with `-p leasecron.testing.pytest_plugin`
or `pytest_plugins = [...]`). Needs the testing extra: `pip install 'leasecron[testing]'`.

    from leasecron.testing import ControlPlane, apply_manifests

    with ControlPlane() as cp, cp.api_client() as api:
        apply_manifests(api, [Path("crds/scheduledjob.yaml")])

Names are imported on first use, so loading the pytest plugin costs nothing for test runs
that never touch a cluster. Owns the public names listed in `__all__`; everything in the
underscore modules may change without notice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasecron.testing._access import ClusterAccess, ExistingCluster, write_kubeconfig
    from leasecron.testing._assets import (
        KUBERNETES_VERSION,
        Assets,
        cache_dir,
        ensure_assets,
        find_assets,
        run_helm,
    )
    from leasecron.testing._children import ChildProcess, stop_children
    from leasecron.testing._manifests import (
        apply_leasecron_crds,
        apply_manifests,
        load_manifests,
        wait_crd_established,
    )
    from leasecron.testing._node import NodeCluster, missing_node_prerequisites, node_cache_dir
    from leasecron.testing._polling import poll
    from leasecron.testing._processes import ControlPlaneError, free_port
    from leasecron.testing._rbac import PolicyRule, create_serviceaccount
    from leasecron.testing._stores import (
        PostgresDatabase,
        PostgresServer,
        RedisDatabase,
        RedisServer,
        StoreMissingError,
        postgres_database,
        postgres_server,
        redis_server,
    )
    from leasecron.testing._toxiproxy import Proxy, Toxiproxy, kubeconfig_via
    from leasecron.testing.controlplane import ControlPlane
    from leasecron.testing.faults import Fault, FaultPlan, FaultRule, fault_plan, install_from_env

_EXPORTS = {
    "ClusterAccess": "leasecron.testing._access",
    "ExistingCluster": "leasecron.testing._access",
    "write_kubeconfig": "leasecron.testing._access",
    "KUBERNETES_VERSION": "leasecron.testing._assets",
    "Assets": "leasecron.testing._assets",
    "cache_dir": "leasecron.testing._assets",
    "ensure_assets": "leasecron.testing._assets",
    "find_assets": "leasecron.testing._assets",
    "run_helm": "leasecron.testing._assets",
    "ChildProcess": "leasecron.testing._children",
    "stop_children": "leasecron.testing._children",
    "apply_leasecron_crds": "leasecron.testing._manifests",
    "apply_manifests": "leasecron.testing._manifests",
    "load_manifests": "leasecron.testing._manifests",
    "wait_crd_established": "leasecron.testing._manifests",
    "NodeCluster": "leasecron.testing._node",
    "missing_node_prerequisites": "leasecron.testing._node",
    "node_cache_dir": "leasecron.testing._node",
    "ControlPlaneError": "leasecron.testing._processes",
    "free_port": "leasecron.testing._processes",
    "poll": "leasecron.testing._polling",
    "PolicyRule": "leasecron.testing._rbac",
    "create_serviceaccount": "leasecron.testing._rbac",
    "PostgresDatabase": "leasecron.testing._stores",
    "PostgresServer": "leasecron.testing._stores",
    "RedisDatabase": "leasecron.testing._stores",
    "RedisServer": "leasecron.testing._stores",
    "StoreMissingError": "leasecron.testing._stores",
    "postgres_database": "leasecron.testing._stores",
    "postgres_server": "leasecron.testing._stores",
    "redis_server": "leasecron.testing._stores",
    "ControlPlane": "leasecron.testing.controlplane",
    "Fault": "leasecron.testing.faults",
    "FaultPlan": "leasecron.testing.faults",
    "FaultRule": "leasecron.testing.faults",
    "fault_plan": "leasecron.testing.faults",
    "install_from_env": "leasecron.testing.faults",
    "Proxy": "leasecron.testing._toxiproxy",
    "Toxiproxy": "leasecron.testing._toxiproxy",
    "kubeconfig_via": "leasecron.testing._toxiproxy",
}

__all__ = [
    "KUBERNETES_VERSION",
    "Assets",
    "ChildProcess",
    "ClusterAccess",
    "ControlPlane",
    "ControlPlaneError",
    "ExistingCluster",
    "Fault",
    "FaultPlan",
    "FaultRule",
    "NodeCluster",
    "PolicyRule",
    "PostgresDatabase",
    "PostgresServer",
    "Proxy",
    "RedisDatabase",
    "RedisServer",
    "StoreMissingError",
    "Toxiproxy",
    "apply_leasecron_crds",
    "apply_manifests",
    "cache_dir",
    "create_serviceaccount",
    "ensure_assets",
    "fault_plan",
    "find_assets",
    "free_port",
    "install_from_env",
    "kubeconfig_via",
    "load_manifests",
    "missing_node_prerequisites",
    "node_cache_dir",
    "poll",
    "postgres_database",
    "postgres_server",
    "redis_server",
    "run_helm",
    "stop_children",
    "wait_crd_established",
    "write_kubeconfig",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'leasecron.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
