"""pytest fixtures for tests against a real Kubernetes API server.

Not loaded into every pytest run: installing leasecron registers no pytest plugin. Install
the testing extra (`pip install 'leasecron[testing]'`) and enable it in your root conftest.py
or on the command line:

    pytest_plugins = ["leasecron.testing.pytest_plugin"]      # conftest.py
    pytest -p leasecron.testing.pytest_plugin                 # or addopts in pyproject.toml

One local control plane (etcd + kube-apiserver + kube-controller-manager) is started per test
session, lazily, the first time a test asks for one of these fixtures; a session that never
asks starts nothing. Set `LEASECRON_TEST_KUBECONFIG=/path/to/kubeconfig` to run against a
cluster you already have instead (its user must be allowed everything).

    def test_my_handler_sees_the_lease(kube_api, namespace):
        CoordinationV1Api(kube_api).create_namespaced_lease(namespace, body)

Tests that use any of these fixtures are marked `integration` automatically. Owns the fixtures
below; does not clean up objects a test creates outside its `namespace`.

For handlers that write to a database, real servers come beside the cluster, each started
once per session on first use (leasecron.testing._stores): `postgres_server` and
`postgres_database` (a fresh database per test; `.url`, `.dsn`, `.connect()`), `redis_server`
and `redis_database` (flushed per test; `.url`, `.client()`, `.async_client()`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from leasecron.testing._access import ClusterAccess
    from leasecron.testing.controlplane import ControlPlane

from leasecron.testing._stores import (  # noqa: F401 (fixtures registered by import)
    postgres_database_fixture,
    postgres_server_fixture,
    redis_database_fixture,
    redis_server_fixture,
)

if importlib.util.find_spec("cryptography") is None:
    raise ImportError(
        "leasecron.testing.pytest_plugin needs the testing extra (cryptography is not "
        "installed): pip install 'leasecron[testing]'"
    )

ENV_KUBECONFIG = "LEASECRON_TEST_KUBECONFIG"
CLUSTER_FIXTURES = frozenset(
    {
        "controlplane",
        "local_controlplane",
        "kubeconfig",
        "kube_api",
        "namespace",
        "serviceaccount_client",
        "leasecron_crds",
    }
)


class ServiceAccountClientFactory(Protocol):
    """What the `serviceaccount_client` fixture returns; see its docstring."""

    def __call__(
        self,
        *,
        namespace: str,
        name: str,
        rules: Sequence[Mapping[str, Sequence[str]]] | None = None,
        expiration_seconds: int = 3600,
    ) -> ApiClient: ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs the local control plane")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def _say(config: pytest.Config, message: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"[leasecron] {message}")


@pytest.fixture(scope="session")
def controlplane(request: pytest.FixtureRequest) -> Iterator[ClusterAccess]:
    """The session's cluster: a local `ControlPlane`, started on first use and stopped at the
    end of the session, or an `ExistingCluster` when `LEASECRON_TEST_KUBECONFIG` is set.

    Offers `.server`, `.kubeconfig`, `.version`, `.api_client()`, `.mint_token(...)`,
    `.kubeconfig_for_token(...)` and `.client_for_serviceaccount(...)`. Shared by every test
    of the session: put what you create in the `namespace` fixture's namespace. To stop and
    restart the API server use `local_controlplane`."""
    existing = os.environ.get(ENV_KUBECONFIG)
    if existing:
        from leasecron.testing._access import ExistingCluster

        with ExistingCluster(kubeconfig=Path(existing)) as cluster:
            _say(request.config, f"using the cluster of {existing} ({cluster.server})")
            yield cluster
        return
    from leasecron.testing.controlplane import ControlPlane

    _say(request.config, "starting a local control plane")
    with ControlPlane() as plane:
        _say(
            request.config,
            f"control plane {plane.version} at {plane.server} ready in "
            f"{plane.startup_seconds:.1f}s (logs in {plane.workdir / 'logs'})",
        )
        yield plane


@pytest.fixture
def local_controlplane(controlplane: ClusterAccess) -> ControlPlane:
    """The session's `ControlPlane` when it runs locally, for tests that call
    `stop_apiserver()` / `start_apiserver()` (the store becoming unreachable and coming back).
    Skipped when `LEASECRON_TEST_KUBECONFIG` points at an existing cluster. A test that stops
    the API server must start it again before it ends (use try/finally)."""
    from leasecron.testing.controlplane import ControlPlane

    if not isinstance(controlplane, ControlPlane):
        pytest.skip(f"needs a local control plane; {ENV_KUBECONFIG} selects an existing one")
    return controlplane


@pytest.fixture(scope="session")
def kubeconfig(controlplane: ClusterAccess) -> Path:
    """Path of an admin kubeconfig for the session's cluster (for subprocesses: set
    `KUBECONFIG` to it)."""
    return controlplane.kubeconfig


@pytest.fixture
def kube_api(controlplane: ClusterAccess) -> Iterator[ApiClient]:
    """An admin `kubernetes.client.ApiClient` for the session's cluster, closed after the test.

    Wrap it in the typed APIs: `CoreV1Api(kube_api)`, `CoordinationV1Api(kube_api)`,
    `CustomObjectsApi(kube_api)`."""
    with controlplane.api_client() as api:
        yield api


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{slug or 'test'}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube_api: ApiClient) -> Iterator[str]:
    """The name of a fresh namespace for this test only (`t-<test name>-<random>`), created
    before the test and deleted after it without waiting (the namespace controller empties
    it in the background). Put everything the test creates in it."""
    from kubernetes import client

    name = _namespace_name(request.node.name)
    core = client.CoreV1Api(kube_api)
    labels = {"app.kubernetes.io/managed-by": "leasecron-testing"}
    body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    core.create_namespace(body=body)
    yield name
    core.delete_namespace(name=name, propagation_policy="Background")


@pytest.fixture
def serviceaccount_client(
    controlplane: ClusterAccess, kube_api: ApiClient
) -> Iterator[ServiceAccountClientFactory]:
    """A factory for API clients that act as a ServiceAccount, to test what RBAC lets your
    code do:

        api = serviceaccount_client(namespace=namespace, name="replica", rules=[
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "list", "watch", "create", "update"]},
        ])

    Creates the ServiceAccount and, when `rules` are given, a Role and RoleBinding of the same
    name in `namespace`, waits until the authorizer honours them, and returns an `ApiClient`
    authenticated with a token minted through the TokenRequest API (lifetime
    `expiration_seconds`, at least 600). Clients are closed after the test; the objects go
    with the namespace."""
    from leasecron.testing._rbac import create_serviceaccount

    clients = contextlib.ExitStack()

    def make(
        *,
        namespace: str,
        name: str,
        rules: Sequence[Mapping[str, Sequence[str]]] | None = None,
        expiration_seconds: int = 3600,
    ) -> ApiClient:
        create_serviceaccount(kube_api, namespace=namespace, name=name, rules=rules)
        api = controlplane.client_for_serviceaccount(
            namespace=namespace, service_account=name, expiration_seconds=expiration_seconds
        )
        clients.enter_context(api)
        return api

    with clients:
        yield make


@pytest.fixture(scope="session")
def leasecron_crds(controlplane: ClusterAccess) -> list[str]:
    """Installs leasecron's CRDs (ScheduledJob, JobRun) in the session's cluster once, waits
    until they are Established, and returns their names."""
    from leasecron.testing._manifests import apply_leasecron_crds

    with controlplane.api_client() as api:
        return apply_leasecron_crds(api)
