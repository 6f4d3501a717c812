"""The example app's Deployment (examples/app/example-app.yaml) run from the operator image
as the manifest says: its container's command, environment and restricted security settings,
as its ServiceAccount, with the app RBAC the chart renders for examples/app/values.yaml (moved
to the test's namespace), against the local control plane, logged in in-cluster style. Part
of `make image-smoke`; skips like test_image_smoke.py.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from _containers import (
    ROOT,
    Engine,
    Helm,
    container_of,
    kubectl_apply,
    lease_holder,
)
from _images import NEEDS_IMAGE, Running, apply_rbac, engine_and_image_or_skip, start_as_pod
from leasecron.models.names import GROUP, JOBRUN_PLURAL, LABEL_JOB, VERSION, job_lease_name
from leasecron.testing import ControlPlane, find_assets, poll

pytestmark = [pytest.mark.e2e, NEEDS_IMAGE]
EXAMPLE_APP = ROOT / "examples" / "app"


@pytest.fixture(scope="session")
def engine_and_image() -> tuple[Engine, str]:
    return engine_and_image_or_skip()


def test_the_example_app_manifest_runs_from_the_image_with_the_chart_app_rbac(
    request: pytest.FixtureRequest,
    engine_and_image: tuple[Engine, str],
    controlplane: Any,
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    leasecron_crds: list[str],
    tmp_path: Path,
) -> None:
    """examples/app/example-app.yaml's container, run as its ServiceAccount with the RBAC the
    chart renders for examples/app/values.yaml (moved to this test's namespace): it runs the
    example jobs, and releases its single-owner Lease on SIGTERM."""
    if not isinstance(controlplane, ControlPlane):
        pytest.skip("needs the local control plane (the container reaches it on 127.0.0.1)")
    engine, image = engine_and_image
    values = yaml.safe_load((EXAMPLE_APP / "values.yaml").read_text())
    values["app"]["namespaces"] = [namespace]
    for account in values["app"]["serviceAccounts"]:
        account["namespace"] = namespace
    values["operator"] = {"namespaces": [namespace]}
    objects = Helm(binary=find_assets().binary("helm"), home=tmp_path / "helm").template(
        f"app-{secrets.token_hex(3)}",
        namespace=namespace,
        kube_version=controlplane.version,
        values=values,
    )
    manifest = list(yaml.safe_load_all((EXAMPLE_APP / "example-app.yaml").read_text()))
    (account,) = [
        {**o, "metadata": {**o["metadata"], "namespace": namespace}}
        for o in manifest
        if o["kind"] == "ServiceAccount"
    ]
    apply_rbac(request, kubeconfig, [*objects, account])
    kubectl = find_assets().binary("kubectl")
    jobs = [
        yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples" / "jobs").glob("*.yaml"))
    ]
    kubectl_apply(
        kubectl,
        kubeconfig,
        [{**j, "metadata": {**j["metadata"], "namespace": namespace}} for j in jobs],
    )
    spec = container_of(manifest, "app")
    pod_name = f"example-app-{secrets.token_hex(3)}"
    app = Running(
        engine=engine,
        name=pod_name,
        namespace=namespace,
        lease=job_lease_name("queue-poller"),
        pod_name=pod_name,
        health_port=0,
        metrics_port=0,
    )
    try:
        start_as_pod(
            engine,
            image=image,
            spec=spec,
            name=pod_name,
            namespace=namespace,
            controlplane=controlplane,
            scratch=tmp_path,
        )

        def invoices() -> list[dict[str, Any]]:
            listed = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                JOBRUN_PLURAL,
                label_selector=f"{LABEL_JOB}=send-invoices",
            )
            runs: list[dict[str, Any]] = cast(dict[str, Any], listed)["items"]
            return [
                r
                for r in runs
                if (r.get("status") or {}).get("outcome") == "Succeeded"
                and r["spec"]["holder"].startswith(pod_name)
            ]

        found = poll(
            lambda: (
                invoices()
                or (app.state().startswith("exited") and f"exited: {app.state()}\n{app.logs()}")
            ),
            timeout=60,
            what="a send-invoices run recorded",
        )
        assert isinstance(found, list), found
        poll(
            lambda: (lease_holder(kube_api, namespace, app.lease) or "").startswith(pod_name),
            timeout=30,
            what="the queue-poller Lease owned",
        )
        engine.run("kill", "--signal", "TERM", pod_name)
        exited = engine.run("wait", pod_name, timeout=60).stdout.strip()
        assert exited == "0", f"exit status {exited}\n{app.logs()}"
        assert lease_holder(kube_api, namespace, app.lease) == ""
    finally:
        print(f"--- logs of {pod_name} ---\n{app.logs()}")
        engine.run("rm", "--force", pod_name, check=False)
