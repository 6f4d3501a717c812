"""Path building and request naming for the API server's REST paths."""

from __future__ import annotations

import pytest

from leasecron.kube._paths import describe, is_write, target
from leasecron.kube.clients import collection_path, object_path


def test_the_core_group_uses_the_legacy_api_prefix() -> None:
    path = collection_path(group="", version="v1", plural="configmaps", namespace="ns")

    assert path == "/api/v1/namespaces/ns/configmaps"


def test_a_named_group_uses_the_apis_prefix() -> None:
    path = collection_path(
        group="coordination.k8s.io", version="v1", plural="leases", namespace="team-a"
    )

    assert path == "/apis/coordination.k8s.io/v1/namespaces/team-a/leases"


def test_without_a_namespace_the_collection_is_cluster_wide() -> None:
    path = collection_path(
        group="leasecron.dev", version="v1alpha1", plural="scheduledjobs", namespace=None
    )

    assert path == "/apis/leasecron.dev/v1alpha1/scheduledjobs"


def test_an_object_path_appends_the_name_and_subresource() -> None:
    path = object_path(
        group="leasecron.dev",
        version="v1alpha1",
        plural="scheduledjobs",
        namespace="billing",
        name="nightly-report",
        subresource="status",
    )

    assert (
        path
        == "/apis/leasecron.dev/v1alpha1/namespaces/billing/scheduledjobs/nightly-report/status"
    )


def test_a_cluster_scoped_object_path_has_no_namespace_segment() -> None:
    path = object_path(group="", version="v1", plural="namespaces", namespace=None, name="x")

    assert path == "/api/v1/namespaces/x"


@pytest.mark.parametrize("bad", ["", "a/b"])
def test_a_name_that_would_change_the_path_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="name"):
        object_path(group="", version="v1", plural="pods", namespace="ns", name=bad)


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", None, ("get", "leases")),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/a/leases", None, ("list", "leases")),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases",
            {"watch": "1"},
            ("watch", "leases"),
        ),
        ("GET", "/apis/coordination.k8s.io/v1/leases", None, ("list", "leases")),
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases", None, ("create", "leases")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", None, ("update", "leases")),
        (
            "PATCH",
            "/apis/leasecron.dev/v1alpha1/namespaces/a/scheduledjobs/j/status",
            None,
            ("patch", "scheduledjobs/status"),
        ),
        ("DELETE", "/api/v1/namespaces/a/configmaps/c", None, ("delete", "configmaps")),
        ("DELETE", "/api/v1/namespaces/a/configmaps", None, ("deletecollection", "configmaps")),
        ("GET", "/api/v1/namespaces/a", None, ("get", "namespaces")),
        ("GET", "/api/v1/namespaces", None, ("list", "namespaces")),
        ("GET", "/readyz", None, ("list", "")),
    ],
)
def test_a_request_is_named_by_its_verb_and_resource(
    method: str, path: str, query: dict[str, str] | None, expected: tuple[str, str]
) -> None:
    assert describe(method, path, query) == expected


@pytest.mark.parametrize(
    ("method", "writes"),
    [("GET", False), ("post", True), ("PUT", True), ("PATCH", True), ("DELETE", True)],
)
def test_only_state_changing_methods_count_as_writes(method: str, writes: bool) -> None:
    assert is_write(method) is writes


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/a", ("ns", "a")),
        ("/apis/coordination.k8s.io/v1/namespaces/ns/leases", ("ns", None)),
        ("/apis/leasecron.dev/v1/namespaces/ns/jobruns/r%2Fx/status", ("ns", "r/x")),
        ("/apis/leasecron.dev/v1/jobruns", (None, None)),
        ("/api/v1/namespaces/ns", (None, "ns")),
        ("/api/v1/nodes/n1", (None, "n1")),
        ("/readyz", (None, None)),
    ],
)
def test_a_request_path_names_the_namespace_and_object_it_addresses(
    path: str, expected: tuple[str | None, str | None]
) -> None:
    assert target(path) == expected
