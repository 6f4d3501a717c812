"""The local control-plane harness, checked against the real API server it starts: the API
behaviour the rest of the suite builds on (conditional writes, RBAC, garbage collection), the
`leasecron cluster` command, and how the harness fails and cleans up after itself."""

from __future__ import annotations

import copy
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import urllib3
import yaml
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from leasecron.testing import (
    KUBERNETES_VERSION,
    ClusterAccess,
    ControlPlane,
    ControlPlaneError,
    apply_manifests,
    create_serviceaccount,
    find_assets,
)
from leasecron.testing._processes import free_port
from leasecron.testing.pytest_plugin import ServiceAccountClientFactory

LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"]}
]
LEASECRON = Path(sys.executable).with_name("leasecron")


def _lease(name: str, *, holder: str, owner: client.V1ConfigMap | None = None) -> client.V1Lease:
    references = None
    if owner is not None:
        references = [
            client.V1OwnerReference(
                api_version="v1",
                kind="ConfigMap",
                name=str(_meta(owner).name),
                uid=str(_meta(owner).uid),
            )
        ]
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name, owner_references=references),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15),
    )


def _holder(lease: client.V1Lease) -> str | None:
    assert lease.spec is not None
    return lease.spec.holder_identity


def _meta(obj: client.V1Lease | client.V1ConfigMap) -> client.V1ObjectMeta:
    assert obj.metadata is not None
    return obj.metadata


def _eventually(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll another process's state until `check` holds; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g}s: {what}")
        time.sleep(0.1)


# -- the API server behaves as the coordination code relies on ------------------------------


def test_a_lease_update_carrying_a_stale_resource_version_is_rejected_with_409(
    kube_api: ApiClient, namespace: str, request: pytest.FixtureRequest
) -> None:
    leases = client.CoordinationV1Api(kube_api)
    observed = leases.create_namespaced_lease(namespace, _lease("job", holder="replica-a"))
    winner = copy.deepcopy(observed)
    assert winner.spec is not None and observed.spec is not None
    winner.spec.holder_identity = "replica-b"
    leases.replace_namespaced_lease("job", namespace, winner)

    observed.spec.holder_identity = "replica-c"
    with pytest.raises(ApiException) as rejected:
        leases.replace_namespaced_lease("job", namespace, observed)

    assert rejected.value.status == 409
    assert _holder(leases.read_namespaced_lease("job", namespace)) == "replica-b"
    assert request.node.get_closest_marker("integration") is not None


@pytest.fixture
def other_namespace(kube_api: ApiClient, namespace: str) -> Iterator[str]:
    name = f"{namespace}-other"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name, propagation_policy="Background")


def test_a_serviceaccount_may_update_leases_in_its_own_namespace_and_is_forbidden_in_another(
    kube_api: ApiClient,
    namespace: str,
    other_namespace: str,
    serviceaccount_client: ServiceAccountClientFactory,
) -> None:
    admin = client.CoordinationV1Api(kube_api)
    for ns in (namespace, other_namespace):
        admin.create_namespaced_lease(ns, _lease("job", holder="nobody"))
    replica = client.CoordinationV1Api(
        serviceaccount_client(namespace=namespace, name="replica", rules=LEASE_RULES)
    )

    own = replica.read_namespaced_lease("job", namespace)
    assert own.spec is not None
    own.spec.holder_identity = "replica"
    replica.replace_namespaced_lease("job", namespace, own)
    with pytest.raises(ApiException) as forbidden:
        replica.read_namespaced_lease("job", other_namespace)

    assert _holder(admin.read_namespaced_lease("job", namespace)) == "replica"
    assert forbidden.value.status == 403


def test_deleting_the_owner_garbage_collects_a_lease_it_owns(
    kube_api: ApiClient, namespace: str
) -> None:
    core, leases = client.CoreV1Api(kube_api), client.CoordinationV1Api(kube_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    leases.create_namespaced_lease(namespace, _lease("owned", holder="x", owner=owner))
    leases.create_namespaced_lease(namespace, _lease("bystander", holder="x"))

    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def collected() -> bool:
        names = {_meta(item).name for item in leases.list_namespaced_lease(namespace).items}
        return "owned" not in names

    _eventually(collected, timeout=30, what="the garbage collector deletes the owned Lease")
    assert _holder(leases.read_namespaced_lease("bystander", namespace)) == "x"


def test_a_token_kubeconfig_authenticates_kubectl_as_the_serviceaccount(
    controlplane: ClusterAccess, kube_api: ApiClient, namespace: str
) -> None:
    create_serviceaccount(kube_api, namespace=namespace, name="reader")
    token = controlplane.mint_token(namespace=namespace, service_account="reader")
    kubeconfig = controlplane.kubeconfig_for_token(token=token, name=f"{namespace}-reader")
    kubectl = find_assets().binary("kubectl")

    whoami = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    user = json.loads(whoami.stdout)["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{namespace}:reader"


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.harness.leasecron.dev"},
    "spec": {
        "group": "harness.leasecron.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def test_a_crd_applied_with_its_objects_is_established_before_they_are_applied(
    kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    widget = {
        "apiVersion": "harness.leasecron.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3},
    }
    manifest = tmp_path / "widget.yaml"
    manifest.write_text(yaml.safe_dump(widget))

    apply_manifests(kube_api, [WIDGET_CRD, manifest], namespace=namespace)
    applied_again = apply_manifests(kube_api, [WIDGET_CRD, manifest], namespace=namespace)

    stored = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        "harness.leasecron.dev", "v1", namespace, "widgets", "w"
    )
    assert isinstance(stored, dict) and stored["spec"] == {"size": 3}
    assert applied_again[1]["metadata"]["namespace"] == namespace


# -- restarting the API server and running clusters side by side -----------------------------


def test_the_api_server_comes_back_on_the_same_port_with_its_data(
    local_controlplane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    leases = client.CoordinationV1Api(kube_api)
    before = leases.create_namespaced_lease(namespace, _lease("job", holder="replica-a"))
    server = local_controlplane.server

    local_controlplane.stop_apiserver()
    try:
        with pytest.raises(urllib3.exceptions.HTTPError):
            leases.read_namespaced_lease("job", namespace, _request_timeout=2)
    finally:
        local_controlplane.start_apiserver()

    after = leases.read_namespaced_lease("job", namespace)
    assert local_controlplane.server == server
    assert _meta(after).uid == _meta(before).uid


def test_etcd_comes_back_with_its_data_and_the_api_server_serves_again(
    local_controlplane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    leases = client.CoordinationV1Api(kube_api)
    before = leases.create_namespaced_lease(namespace, _lease("etcd-job", holder="replica-a"))

    local_controlplane.stop_etcd()
    try:
        with pytest.raises((ApiException, urllib3.exceptions.HTTPError)):
            leases.read_namespaced_lease("etcd-job", namespace, _request_timeout=5)
    finally:
        local_controlplane.start_etcd()

    after = _read_eventually(leases, "etcd-job", namespace)
    assert _meta(after).uid == _meta(before).uid


def _read_eventually(leases: client.CoordinationV1Api, name: str, namespace: str) -> object:
    """The API server reconnects to etcd by itself, a moment after etcd is healthy again."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            return leases.read_namespaced_lease(name, namespace, _request_timeout=5)
        except (ApiException, urllib3.exceptions.HTTPError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # polling another process's reconnect: nothing to wait on


def test_a_second_cluster_runs_beside_the_session_one_sharing_nothing(
    controlplane: ClusterAccess, namespace: str, tmp_path: Path
) -> None:
    with (
        ControlPlane(base_dir=tmp_path, controller_manager=False) as second,
        second.api_client() as api,
    ):
        with pytest.raises(ApiException) as missing:
            client.CoreV1Api(api).read_namespace(namespace)
        assert second.server != controlplane.server
        assert second.version == KUBERNETES_VERSION
    assert missing.value.status == 404
    assert not second.workdir.exists()


# -- the command line ------------------------------------------------------------------------


def test_cluster_run_runs_kubectl_against_a_fresh_cluster_and_exits_with_its_code() -> None:
    completed = subprocess.run(
        [str(LEASECRON), "cluster", "run", "--", "kubectl", "get", "--raw", "/version"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["gitVersion"] == KUBERNETES_VERSION


def test_cluster_run_with_crds_uses_the_cached_kubectl_and_keeps_the_files_of_a_failed_command(
    tmp_path: Path,
) -> None:
    script = "command -v kubectl; kubectl get crd -o name; exit 7"

    completed = subprocess.run(
        [str(LEASECRON), "cluster", "run", "--crds", "--keep-on-failure", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )

    kubectl, *crds = completed.stdout.split()
    kept = list(tmp_path.glob("leasecron-cp-*"))
    assert completed.returncode == 7, completed.stderr
    assert kubectl == str(find_assets().binary("kubectl"))
    assert sorted(crds) == [
        "customresourcedefinition.apiextensions.k8s.io/jobruns.leasecron.dev",
        "customresourcedefinition.apiextensions.k8s.io/scheduledjobs.leasecron.dev",
    ]
    assert len(kept) == 1 and str(kept[0]) in completed.stderr
    assert (kept[0] / "logs" / "kube-apiserver.log").is_file()


def _read_line(process: subprocess.Popen[str], *, prefix: str, timeout: float) -> str:
    """The first stdout line starting with `prefix`, waiting at most `timeout` seconds."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                break
            line = process.stdout.readline()
            if line.startswith(prefix):
                return line.strip()
            if not line:
                break
    pytest.fail(f"no line starting with {prefix!r} within {timeout}s (exit {process.poll()})")


@pytest.mark.parametrize(
    ("signum", "exit_code"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 0)]
)
def test_cluster_up_stops_every_component_when_interrupted(
    signum: signal.Signals, exit_code: int, tmp_path: Path
) -> None:
    with (tmp_path / "stderr.log").open("w") as stderr:
        process = subprocess.Popen(
            [str(LEASECRON), "cluster", "up"], stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        try:
            line = _read_line(process, prefix="export KUBECONFIG=", timeout=120)
            children = psutil.Process(process.pid).children(recursive=True)
            components = {child.pid: child.name() for child in children}
            process.send_signal(signum)
            code = process.wait(timeout=60)
        finally:
            process.kill()
            process.wait()
            assert process.stdout is not None
            process.stdout.close()
    workdir = Path(line.removeprefix("export KUBECONFIG=")).parent

    assert set(components.values()) >= {"etcd", "kube-apiserver", "kube-controller-manager"}
    assert code == exit_code, (tmp_path / "stderr.log").read_text()
    assert [pid for pid in components if psutil.pid_exists(pid)] == []
    assert not workdir.exists()


def test_cluster_up_stops_cleanly_when_interrupted_while_printing_how_to_use_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C the moment the KUBECONFIG line is out (before the wait begins) still means
    "stop": exit 0, every component stopped, no "Aborted!"."""
    from click.testing import CliRunner

    from leasecron.cli import _cluster, main

    lines: list[str] = []
    echo = _cluster.click.echo

    def interrupted_after_the_first_line(message: Any = None, **kwargs: Any) -> None:
        echo(message, **kwargs)
        lines.append(str(message))
        if len(lines) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(_cluster.click, "echo", interrupted_after_the_first_line)
    # In this process, leave the suite's logging as it is (the command configures its own).
    monkeypatch.setattr(_cluster._logs, "configure", lambda **_: None)
    before = {child.pid for child in psutil.Process().children(recursive=True)}

    result = CliRunner().invoke(main, ["cluster", "up"])

    assert lines[0].startswith("export KUBECONFIG="), lines
    workdir = Path(lines[0].removeprefix("export KUBECONFIG=")).parent
    assert result.exit_code == 0, (result.output, result.exception)
    assert "stopping" in lines
    assert "Aborted" not in result.output
    left = {child.pid for child in psutil.Process().children(recursive=True)} - before
    assert [pid for pid in left if psutil.pid_exists(pid)] == []
    assert not workdir.exists()


# -- finding the binaries ----------------------------------------------------------------------


def _fake_binaries(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


def test_envtest_assets_win_and_the_cache_fills_in_what_they_lack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    envtest = _fake_binaries(tmp_path / "envtest", "etcd", "kube-apiserver", "kubectl")
    cache = tmp_path / "xdg" / "leasecron" / f"k8s-{KUBERNETES_VERSION}"
    _fake_binaries(cache, "etcd", "kube-controller-manager", "helm")
    monkeypatch.delenv("LEASECRON_ASSETS", raising=False)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(envtest))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    assets = find_assets()

    assert {name: path.parent for name, path in assets.paths.items()} == {
        "etcd": envtest,
        "kube-apiserver": envtest,
        "kube-controller-manager": cache,
        "kubectl": envtest,
        "helm": cache,
    }
    assert assets.path_dirs == [envtest, cache]


def test_leasecron_assets_is_the_only_place_looked_at_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = _fake_binaries(tmp_path / "chosen", "etcd")
    monkeypatch.setenv("LEASECRON_ASSETS", str(chosen))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(_fake_binaries(tmp_path / "envtest", "helm")))

    assets = find_assets()

    assert list(assets.paths) == ["etcd"]
    with pytest.raises(ControlPlaneError, match="make controlplane") as missing:
        assets.binary("kube-apiserver")
    assert missing.value.component == "kube-apiserver"


# -- failures name the component and leave nothing behind ------------------------------------


@pytest.fixture
def no_new_children() -> Iterator[None]:
    """Asserts after the test that every child process the test started has been reaped."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after - before == set()


def _assets_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fakes: str) -> Path:
    """An asset dir linking the real binaries, with `fakes` (name -> shell script body)
    replacing some of them and "" meaning missing; selected through LEASECRON_ASSETS."""
    real = find_assets()
    directory = tmp_path / "assets"
    directory.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        target = directory / name
        body = fakes.get(name.replace("-", "_"))
        if body is None:
            target.symlink_to(real.binary(name))
        elif body:
            target.write_text(f"#!/bin/sh\n{body}\n")
            target.chmod(0o755)
    monkeypatch.setenv("LEASECRON_ASSETS", str(directory))
    return directory


def _assert_stopped(plane: ControlPlane) -> None:
    pids = [pid for pids in plane.started_pids.values() for pid in pids]
    assert [pid for pid in pids if psutil.pid_exists(pid)] == []


@pytest.mark.usefixtures("no_new_children")
def test_a_missing_binary_is_named_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = _assets_with(tmp_path, monkeypatch, kube_apiserver="")
    plane = ControlPlane(base_dir=tmp_path)

    with pytest.raises(ControlPlaneError) as failed:
        plane.start()

    assert failed.value.component == "kube-apiserver"
    assert str(assets) in str(failed.value)
    assert plane.started_pids == {}
    assert list(tmp_path.glob("leasecron-cp-*")) == []


@pytest.mark.usefixtures("no_new_children")
def test_a_binary_that_exits_at_once_is_reported_with_its_log_and_etcd_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _assets_with(tmp_path, monkeypatch, kube_apiserver="echo 'fake: cannot serve' >&2; exit 3")
    plane = ControlPlane(base_dir=tmp_path)

    with pytest.raises(ControlPlaneError) as failed:
        plane.start()

    error = failed.value
    assert (error.component, "etcd" in plane.started_pids) == ("kube-apiserver", True)
    assert error.log_path is not None and str(error.log_path) in str(error)
    assert "fake: cannot serve" in error.log_path.read_text()
    assert error.workdir is not None and error.log_path.is_relative_to(error.workdir)
    _assert_stopped(plane)


@pytest.mark.usefixtures("no_new_children")
@pytest.mark.parametrize("component", ["etcd", "kube-apiserver"])
def test_a_port_already_taken_fails_the_component_that_wanted_it(
    component: str, tmp_path: Path
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        argument = "etcd_port" if component == "etcd" else "apiserver_port"
        plane = ControlPlane(base_dir=tmp_path, controller_manager=False, **{argument: port})
        with pytest.raises(ControlPlaneError) as failed:
            plane.start()

    error = failed.value
    assert error.component == component
    assert error.log_path is not None and "address already in use" in error.log_path.read_text()
    assert str(error.log_path) in str(error)
    _assert_stopped(plane)


@pytest.mark.usefixtures("no_new_children")
def test_an_api_server_that_never_becomes_ready_times_out_naming_it(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    plane = ControlPlane(
        base_dir=tmp_path, etcd_url=nobody, controller_manager=False, start_timeout=3
    )

    with pytest.raises(ControlPlaneError, match="not ready after 3s") as failed:
        plane.start()

    assert failed.value.component == "kube-apiserver"
    assert failed.value.log_path is not None and failed.value.log_path.is_file()
    assert list(plane.started_pids) == ["kube-apiserver"]
    _assert_stopped(plane)
