"""The chart's CRDs across a release's life, on a control plane of this module's own (a CRD
belongs to one release, and the session's shared cluster has its CRDs installed otherwise):
`helm install` creates them, `helm upgrade` with a CRD that gained a field serves that field,
`helm uninstall` leaves them, and every ScheduledJob, in place, and the chart README's
commands hand kept CRDs to a new release."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, Helm, install
from kubernetes import client

from leasecron.testing import ControlPlane, ensure_assets, wait_crd_established

pytestmark = pytest.mark.integration

SCHEDULEDJOBS = "scheduledjobs.leasecron.dev"
CRD_NAMES = (SCHEDULEDJOBS, "jobruns.leasecron.dev")
NEW_FIELD = "owningTeam"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(assets=ensure_assets(), controller_manager=False) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    assets = ensure_assets(names=("helm",))
    return Helm(binary=assets.binary("helm"), home=tmp_path_factory.mktemp("helm-home"))


@pytest.fixture
def api(plane: ControlPlane) -> Iterator[client.ApiClient]:
    with plane.api_client() as api_client:
        yield api_client


def _chart_with_a_new_field(tmp_path: Path) -> Path:
    """A copy of the chart whose ScheduledJob CRD has one more spec field, as a newer chart
    version would have."""
    chart = tmp_path / "leasecron"
    shutil.copytree(CHART, chart)
    path = chart / "files" / "crds" / f"{SCHEDULEDJOBS}.yaml"
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert NEW_FIELD not in spec["properties"]
    spec["properties"][NEW_FIELD] = {"type": "string", "description": "The team to page."}
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def _dry_run_job(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    """Create (dry run) a ScheduledJob that sets the new field; the object as served back.
    A field the served schema does not know is pruned from the answer."""
    body = {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "poller"},
        "spec": {"bucket": "single-owner", NEW_FIELD: "payments"},
    }
    served: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", body, dry_run="All"
    )
    return served


def _serves_new_field(api: client.ApiClient, namespace: str, *, timeout: float = 20) -> bool:
    """Whether the API server keeps the new field, waiting (bounded) for it to load the
    upgraded schema."""
    deadline = time.monotonic() + timeout
    while NEW_FIELD not in _dry_run_job(api, namespace)["spec"]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _crd(api: client.ApiClient, name: str) -> client.V1CustomResourceDefinition:
    return client.ApiextensionsV1Api(api).read_custom_resource_definition(name=name)


def test_install_creates_the_crds_upgrade_serves_a_new_field_and_uninstall_keeps_them(
    helm: Helm, plane: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    namespace = "leasecron-system"
    client.CoreV1Api(api).create_namespace(
        body=client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    release = install(helm, kubeconfig=plane.kubeconfig, namespace=namespace, sets=(), crds=True)
    for name in CRD_NAMES:
        wait_crd_established(api, name=name)
        metadata = _crd(api, name).metadata
        assert metadata.annotations["meta.helm.sh/release-name"] == release.name
        assert metadata.annotations["helm.sh/resource-policy"] == "keep"
    assert NEW_FIELD not in _dry_run_job(api, namespace)["spec"]

    helm.run(
        "upgrade",
        release.name,
        str(_chart_with_a_new_field(tmp_path)),
        "--namespace",
        namespace,
        kubeconfig=plane.kubeconfig,
    )

    assert _serves_new_field(api, namespace), f"spec.{NEW_FIELD} is not served after upgrade"
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "leasecron.dev",
        "v1alpha1",
        namespace,
        "scheduledjobs",
        {**_dry_run_job(api, namespace), "metadata": {"name": "poller"}},
    )

    helm.run("uninstall", release.name, "--namespace", namespace, kubeconfig=plane.kubeconfig)

    for name in CRD_NAMES:  # kept: deleting a CRD deletes every job in the cluster
        wait_crd_established(api, name=name)
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "leasecron.dev", "v1alpha1", namespace, "scheduledjobs", "poller"
    )
    assert job["spec"][NEW_FIELD] == "payments"


def test_kept_crds_are_handed_to_a_new_release_as_the_chart_readme_says(
    helm: Helm, plane: ControlPlane, api: client.ApiClient
) -> None:
    namespace = "leasecron-again"
    client.CoreV1Api(api).create_namespace(
        body=client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    if not _crds_present(api):  # else kept by the first test's release, which is gone
        old = install(helm, kubeconfig=plane.kubeconfig, namespace=namespace, sets=(), crds=True)
        helm.run("uninstall", old.name, "-n", namespace, kubeconfig=plane.kubeconfig)
    for name in CRD_NAMES:
        wait_crd_established(api, name=name)
    refused = helm.run(
        "install",
        "leasecron-new",
        str(CHART),
        "-n",
        namespace,
        kubeconfig=plane.kubeconfig,
        check=False,
    )
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr

    kubectl = str(ensure_assets(names=("kubectl",)).binary("kubectl"))
    for command in _readme_adoption_commands(release="leasecron-new", namespace=namespace):
        subprocess.run(
            [kubectl, "--kubeconfig", str(plane.kubeconfig), *command[1:]],
            check=True,
            capture_output=True,
            timeout=60,
        )
    helm.run("install", "leasecron-new", str(CHART), "-n", namespace, kubeconfig=plane.kubeconfig)

    for name in CRD_NAMES:
        annotations = _crd(api, name).metadata.annotations
        assert annotations["meta.helm.sh/release-name"] == "leasecron-new"


def _crds_present(api: client.ApiClient) -> bool:
    names = {
        crd.metadata.name
        for crd in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    }
    return set(CRD_NAMES) <= names


def _readme_adoption_commands(*, release: str, namespace: str) -> list[list[str]]:
    """The `kubectl label`/`kubectl annotate` commands of the chart README, for `release`."""
    text = (CHART / "README.md").read_text(encoding="utf-8")
    block = text.split("```sh\nkubectl label --overwrite crd", 1)[1].split("```", 1)[0]
    joined = ("kubectl label --overwrite crd" + block).replace("\\\n", " ")
    joined = joined.replace("release-name=leasecron ", f"release-name={release} ")
    joined = joined.replace("release-namespace=leasecron-system", f"release-namespace={namespace}")
    commands = [shlex.split(line) for line in joined.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["kubectl", "label"], ["kubectl", "annotate"]]
    return commands
