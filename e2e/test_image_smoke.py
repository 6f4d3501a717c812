"""The operator image, run as the chart runs it, against the local control plane.

`make image && make image-smoke`. The chart is rendered with helm (`helm template`, the
operator watching one namespace); its ServiceAccount and RBAC are applied; the container gets
exactly the rendered command, arguments, environment and security context (uid 65532,
read-only root filesystem with /tmp writable as the chart's emptyDir makes it, every
capability dropped, no privilege escalation) and logs in **in-cluster style**: a TokenRequest
token of the chart's ServiceAccount, the API server's ca.crt and the namespace mounted where
a pod has them, KUBERNETES_SERVICE_HOST/PORT set. Nothing is run on the host's behalf. The
example app's Deployment is run the same way in test_image_example_app.py.

Not part of `make test`: it needs a container engine able to run images (root podman or
docker) and an image built from the commit under test; an image left from another commit
would test other code. It skips, with the reason, when `LEASECRON_IMAGE` is unset (set by
`make image-smoke`), when there is no engine, or when the image was not built.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

import leasecron
from _containers import (
    ROOT,
    Engine,
    Helm,
    container_of,
    lease_holder,
    metric_total,
)
from _images import NEEDS_IMAGE, Running, apply_rbac, engine_and_image_or_skip, start_as_pod
from leasecron.models.names import (
    GROUP,
    JOBRUN_PLURAL,
    SCHEDULEDJOB_PLURAL,
    VERSION,
)
from leasecron.testing import ControlPlane, find_assets, free_port, poll
from leasecron.testing.handlers import scheduled_job

pytestmark = [pytest.mark.e2e, NEEDS_IMAGE]
ELECTION = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}


@pytest.fixture(scope="session")
def engine_and_image() -> tuple[Engine, str]:
    return engine_and_image_or_skip()


@pytest.fixture
def operator_container(
    request: pytest.FixtureRequest,
    engine_and_image: tuple[Engine, str],
    controlplane: Any,
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    leasecron_crds: list[str],
    tmp_path: Path,
) -> Iterator[Running]:
    if not isinstance(controlplane, ControlPlane):
        pytest.skip("needs the local control plane (the container reaches it on 127.0.0.1)")
    engine, image = engine_and_image
    assets = find_assets()
    health_port, metrics_port = free_port(), free_port()
    release = f"smoke-{secrets.token_hex(3)}"
    repository, _, tag = image.rpartition(":")
    objects = Helm(binary=assets.binary("helm"), home=tmp_path / "helm").template(
        release,
        namespace=namespace,
        kube_version=controlplane.version,
        values={
            "image": {"repository": repository, "tag": tag},
            "operator": {
                "namespaces": [namespace],
                "healthPort": health_port,
                "metricsPort": metrics_port,
                "election": ELECTION,
            },
        },
    )
    apply_rbac(request, kubeconfig, objects)
    spec = container_of(objects, "operator")
    pod = spec["pod"]
    # The chart's restricted settings (start_as_pod maps them to the engine's flags).
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        65532,
        65532,
    )
    pod_name = f"{release}-operator-0"
    lease = next(a.split("=", 1)[1] for a in spec["args"] if a.startswith("--election-lease-name="))
    running = Running(
        engine=engine,
        name=pod_name,
        namespace=namespace,
        lease=lease,
        pod_name=pod_name,
        health_port=health_port,
        metrics_port=metrics_port,
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
        yield running
    finally:
        print(f"--- logs of {pod_name} ---\n{running.logs()}")
        engine.run("rm", "--force", pod_name, check=False)


def test_the_image_leads_flags_a_missed_run_serves_its_endpoints_and_releases_on_sigterm(
    operator_container: Running, kube_api: Any, namespace: str
) -> None:
    op = operator_container
    holder = poll(
        lambda: (
            (lease_holder(kube_api, namespace, op.lease) or "").startswith(op.pod_name)
            or (op.state().startswith("exited") and f"exited: {op.state()}\n{op.logs()}")
        ),
        timeout=60,
        what=f"holding the election Lease {op.lease}",
    )
    assert holder is True, holder
    ready = poll(
        lambda: op.get(op.health_port, "/readyz")[0] == 200,
        timeout=30,
        what="ready on /readyz",
    )
    assert ready
    assert op.get(op.health_port, "/healthz")[0] == 200

    # A once-per-tick job of a group no replica runs: nobody claims its ticks.
    job = scheduled_job("orphan", schedule="@every 1s", group="nobody", startingDeadline="1s")
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, job
    )

    def missed_runs() -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = cast(
            dict[str, Any],
            client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
                GROUP, VERSION, namespace, JOBRUN_PLURAL
            ),
        )["items"]
        return [r for r in runs if (r.get("status") or {}).get("outcome") == "Missed"]

    missed = poll(missed_runs, timeout=30, what="a Missed JobRun recorded")
    assert missed[0]["spec"]["job"] == "orphan"

    def on_schedule() -> dict[str, Any] | None:
        job = cast(
            dict[str, Any],
            client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, "orphan"
            ),
        )
        status = job.get("status") or {}
        found = [c for c in status.get("conditions", []) if c["type"] == "OnSchedule"]
        return found[0] if found and found[0]["status"] == "False" else None

    condition = poll(on_schedule, timeout=15, what="OnSchedule=False")
    assert condition["reason"] == "MissedRun"
    code, metrics = op.get(op.metrics_port, "/metrics")
    assert code == 200
    assert metric_total(metrics, "leasecron_missed_runs_total") >= 1

    op.engine.run("kill", "--signal", "TERM", op.name)
    exited = op.engine.run("wait", op.name, timeout=60).stdout.strip()
    assert exited == "0", f"exit status {exited}\n{op.logs()}"
    assert lease_holder(kube_api, namespace, op.lease) == ""


def test_the_image_holds_exactly_the_locked_dependency_versions(
    engine_and_image: tuple[Engine, str],
) -> None:
    engine, image = engine_and_image
    listing = engine.run(
        "run", "--rm", *engine.run_flags, "--entrypoint", "python", image, "-c",
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))",
    )  # fmt: skip
    installed = {normalize(k): v for k, v in json.loads(listing.stdout).items()}
    lock = (ROOT / "requirements" / "image.txt").read_text()
    locked = {normalize(k): v for k, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock, re.M)}
    assert installed.pop("leasecron") == leasecron.__version__
    assert installed == locked


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
