"""The operator image, run as the chart runs it, against the local control plane.

`make image && make image-smoke`. The chart is rendered with helm (`helm template`, the
operator watching one namespace); its ServiceAccount and RBAC are applied; the container gets
exactly the rendered command, arguments, environment and security context (uid 65532,
read-only root filesystem with /tmp writable as the chart's emptyDir makes it, every
capability dropped, no privilege escalation) and logs in **in-cluster style**: a TokenRequest
token of the chart's ServiceAccount, the API server's ca.crt and the namespace mounted where
a pod has them, KUBERNETES_SERVICE_HOST/PORT set. Nothing is run on the host's behalf.

Not part of `make test`: it needs a container engine able to run images (root podman or
docker) and an image built from the commit under test; an image left from another commit
would test other code. It skips, with the reason, when `LEASECRON_IMAGE` is unset (set by
`make image-smoke`), when there is no engine, or when the image was not built.
"""

from __future__ import annotations

import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from _containers import (
    RBAC_KINDS,
    SERVICEACCOUNT_DIR,
    Engine,
    Helm,
    container_of,
    free_port,
    kubectl_apply,
    kubectl_delete,
    poll,
    serviceaccount_dir,
)
from leasecron.models.names import GROUP, JOBRUN_PLURAL, SCHEDULEDJOB_PLURAL, VERSION
from leasecron.testing import ControlPlane, find_assets
from leasecron.testing.handlers import scheduled_job

IMAGE_ENV = "LEASECRON_IMAGE"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.environ.get(IMAGE_ENV),
        reason=f"runs with `make image && make image-smoke` ({IMAGE_ENV} names the image)",
    ),
]
ELECTION = {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}


@dataclass(frozen=True, kw_only=True)
class Running:
    """The operator container, and what the test needs to talk to it."""

    engine: Engine
    name: str
    namespace: str
    lease: str
    pod_name: str
    health_port: int
    metrics_port: int

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def logs(self) -> str:
        completed = self.engine.run("logs", self.name, check=False)
        return (completed.stdout + completed.stderr)[-6000:]

    def state(self) -> str:
        return self.engine.run(
            "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.name, check=False
        ).stdout.strip()


@pytest.fixture(scope="session")
def engine_and_image() -> tuple[Engine, str]:
    image = os.environ[IMAGE_ENV]
    engine, reason = Engine.find()
    if engine is None:
        pytest.skip(reason)
    if not engine.image_exists(image):
        pytest.skip(f"no image {image} in {engine.name}: run `make image` first")
    return engine, image


def lease_holder(api: Any, namespace: str, name: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return lease.spec.holder_identity or ""


@pytest.fixture
def operator_container(
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
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    kubectl_apply(assets.binary("kubectl"), kubeconfig, rbac)
    spec = container_of(objects, "operator")
    security, pod = spec["securityContext"], spec["pod"]
    # What the chart asks of the runtime, checked here and then passed on below.
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        65532,
        65532,
    )
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert [m["mountPath"] for m in spec["volumeMounts"]] == ["/tmp"]
    account = pod["serviceAccountName"]
    token = controlplane.mint_token(namespace=namespace, service_account=account)
    secrets_dir = serviceaccount_dir(
        tmp_path / "serviceaccount",
        token=token,
        ca_pem=controlplane.ca_file.read_bytes(),
        namespace=namespace,
    )
    pod_name = f"{release}-operator-0"
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env = {
        e["name"]: e["value"] if "value" in e else downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in spec.get("env", [])
    }
    api_server = urlsplit(controlplane.server)
    env |= {
        "KUBERNETES_SERVICE_HOST": str(api_server.hostname),
        "KUBERNETES_SERVICE_PORT": str(api_server.port),
    }
    name = f"leasecron-{release}"
    command = spec["command"]
    engine.run(
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        *engine.run_flags,
        "--user",
        f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "-v",
        f"{secrets_dir}:{SERVICEACCOUNT_DIR}:ro",
        *[arg for k, v in env.items() for arg in ("-e", f"{k}={v}")],
        "--entrypoint",
        command[0],
        image,
        *command[1:],
        *spec["args"],
    )
    lease = next(a.split("=", 1)[1] for a in spec["args"] if a.startswith("--election-lease-name="))
    running = Running(
        engine=engine,
        name=name,
        namespace=namespace,
        lease=lease,
        pod_name=pod_name,
        health_port=health_port,
        metrics_port=metrics_port,
    )
    try:
        yield running
    finally:
        print(f"--- logs of {name} ---\n{running.logs()}")
        engine.run("rm", "--force", name, check=False)
        kubectl_delete(
            assets.binary("kubectl"),
            kubeconfig,
            [o for o in rbac if o["kind"] in ("ClusterRole", "ClusterRoleBinding")],
        )


def metric_total(text: str, name: str) -> float:
    """The sum of every sample of `name` in a Prometheus text exposition."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((f"{name}{{", f"{name} "))
    )


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
        runs = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, JOBRUN_PLURAL
        )["items"]
        return [r for r in runs if (r.get("status") or {}).get("outcome") == "Missed"]

    missed = poll(missed_runs, timeout=30, what="a Missed JobRun recorded")
    assert missed[0]["spec"]["job"] == "orphan"

    def on_schedule() -> dict[str, Any] | None:
        status = (
            client.CustomObjectsApi(kube_api)
            .get_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, "orphan")
            .get("status")
            or {}
        )
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
