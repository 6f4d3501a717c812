"""The whole way in, on a real cluster made by kind (pytest-kind): build the operator image,
load it into the kind node, `helm install` the chart with the example app's values, run the
example app as a 3-replica Deployment, and check one run per tick and a takeover after a pod
is deleted.

Runs where a container engine (docker, or podman as kind's experimental provider) can get
kind's node image. It skips with the reason elsewhere: on a machine without a registry kind
has no node image (`kind create cluster` pulls kindest/node), and Kubernetes 1.35+ nodes
need cgroup v2. kind itself is built from the Go module proxy when it is not on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from _containers import ROOT, Engine, Helm
from leasecron.models.names import job_lease_name
from leasecron.testing import cache_dir, find_assets, poll

pytestmark = [pytest.mark.kind, pytest.mark.e2e]

KIND_VERSION = "v0.33.0"
# The v1.36 node image built for kind v0.33.0 (kind requires the digest of its own release).
NODE_IMAGE = (
    "docker.io/kindest/node:v1.36.4"
    "@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
)
IMAGE = "docker.io/leasecron/operator:kind-e2e"
APP_NAMESPACE = "example-app"
RELEASE_NAMESPACE = "leasecron-system"


def skip_reason(engine: Engine | None, why_no_engine: str) -> str | None:
    """Why kind cannot run here, or None."""
    if engine is None:
        return f"kind needs a container engine: {why_no_engine}"
    if not engine.image_exists(NODE_IMAGE):
        pulled = engine.run("pull", NODE_IMAGE, check=False, timeout=600)
        if pulled.returncode != 0:
            last = (pulled.stderr.strip().splitlines() or ["no output"])[-1]
            return f"kind cannot get its node image {NODE_IMAGE} with {engine.name}: {last}"
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return f"the kind node {NODE_IMAGE} runs Kubernetes 1.36, which needs cgroup v2"
    return None


def kind_binary() -> Path:
    """`kind` from PATH, else kind KIND_VERSION built from the Go module proxy and cached."""
    on_path = shutil.which("kind")
    if on_path:
        return Path(on_path)
    dest = cache_dir().parent / f"kind-{KIND_VERSION}"
    binary = dest / "kind"
    if not binary.exists():
        if shutil.which("go") is None:
            pytest.skip(f"kind is not on PATH and Go is missing to build kind {KIND_VERSION}")
        subprocess.run(
            ["go", "install", f"sigs.k8s.io/kind@{KIND_VERSION}"],
            env={**os.environ, "GOBIN": str(dest)},
            check=True,
            timeout=900,
        )
    return binary


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    engine, why = Engine.find()
    reason = skip_reason(engine, why)
    if reason is not None:
        pytest.skip(reason)
    assert engine is not None
    from pytest_kind import KindCluster

    subprocess.run(["bash", str(ROOT / "e2e" / "containers" / "build-image.sh"), IMAGE], check=True)
    kubectl = find_assets().paths.get("kubectl")
    cluster = KindCluster(
        "leasecron-e2e", image=NODE_IMAGE, kind_path=kind_binary(), kubectl_path=kubectl
    )
    with pytest.MonkeyPatch.context() as env:
        if engine.name == "podman":
            env.setenv("KIND_EXPERIMENTAL_PROVIDER", "podman")
        yield from _created(cluster, engine, tmp_path_factory.mktemp("image"))


def _created(cluster: Any, engine: Engine, scratch: Path) -> Iterator[Any]:
    """`cluster` created with the operator image loaded; deleted afterwards."""
    try:
        cluster.create()
        if engine.name == "docker":
            cluster.load_docker_image(IMAGE)
        else:
            archive = scratch / "operator.tar"
            engine.run("save", "-o", str(archive), IMAGE, timeout=300)
            subprocess.run(
                [str(cluster.kind_path), "load", "image-archive", "--name", cluster.name, archive],
                check=True,
            )
        yield cluster
    finally:
        cluster.delete()


def helm(cluster: Any, *args: str) -> str:
    home = Path(cluster.path) / "helm"
    return Helm(binary=find_assets().binary("helm"), home=home).run(
        *args, kubeconfig=Path(cluster.kubeconfig_path), timeout=600
    )


def example_app(image: str) -> list[dict[str, Any]]:
    objects = list(yaml.safe_load_all((ROOT / "examples" / "app" / "example-app.yaml").read_text()))
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["spec"]["template"]["spec"]["containers"][0]["image"] = image
            obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    return objects


def run_events(cluster: Any, pods: list[str]) -> list[dict[str, Any]]:
    """The `run` events the example app's replicas printed (one JSON line each)."""
    events = []
    for pod in pods:
        for line in cluster.kubectl("logs", "-n", APP_NAMESPACE, pod).splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == "run" and "replica" in event:
                    events.append(event)
    return events


def app_pods(cluster: Any) -> list[str]:
    out = cluster.kubectl(
        "get",
        "pods",
        "-n",
        APP_NAMESPACE,
        "-l",
        "app.kubernetes.io/name=example-app",
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    )
    return str(out).split()


def lease_holder(cluster: Any, name: str) -> str:
    """The Lease's holder; empty when it is free or does not exist yet."""
    return str(
        cluster.kubectl(
            "get",
            "lease",
            name,
            "-n",
            APP_NAMESPACE,
            "--ignore-not-found",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        )
    ).strip()


def test_the_chart_and_the_example_app_run_one_invoice_per_tick_and_survive_a_pod_delete(
    kind: Any,
) -> None:
    repository, _, tag = IMAGE.rpartition(":")
    # The namespace first: the chart binds the app RBAC in it (examples/app/values.yaml).
    kind.kubectl("create", "namespace", APP_NAMESPACE)
    helm(
        kind, "install", "leasecron", str(ROOT / "charts" / "leasecron"),
        "-n", RELEASE_NAMESPACE, "--create-namespace", "--wait", "--timeout", "5m",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        "-f", str(ROOT / "examples" / "app" / "values.yaml"),
    )  # fmt: skip
    kind.kubectl("apply", "-n", APP_NAMESPACE, "-f", str(ROOT / "examples" / "jobs"))
    kind.kubectl(
        "apply", "-n", APP_NAMESPACE, "-f", "-", input=yaml.safe_dump_all(example_app(IMAGE))
    )
    kind.kubectl(
        "rollout", "status", "-n", APP_NAMESPACE, "deployment/example-app", "--timeout=300s"
    )

    # send-invoices ticks every 2 s: each tick runs on exactly one of the three replicas,
    # none is skipped, and its JobRun names the replica that ran it.
    def three_pods() -> list[str] | None:
        found = app_pods(kind)
        return found if len(found) == 3 else None

    pods = poll(three_pods, timeout=60, what="3 example-app pods running")

    def invoice_runs() -> dict[datetime, list[str]] | None:
        runs: dict[datetime, list[str]] = {}
        for event in run_events(kind, pods):
            if event["job"] == "send-invoices":
                runs.setdefault(parse_time(event["tick"]), []).append(event["replica"])
        return runs if len(runs) >= 8 else None

    runs = poll(invoice_runs, timeout=120, what="8 send-invoices ticks run")
    assert all(len(replicas) == 1 for replicas in runs.values()), runs
    ticks = sorted(runs)
    assert all(b - a == timedelta(seconds=2) for a, b in pairwise(ticks)), ticks
    jobruns = json.loads(kind.kubectl("get", "jobruns", "-n", APP_NAMESPACE, "-o", "json"))
    checked = 0
    for record in jobruns["items"]:
        if record["spec"]["job"] != "send-invoices":
            continue
        tick = parse_time(record["spec"]["tick"])
        assert (record.get("status") or {}).get("outcome") != "Missed" or tick not in runs
        if tick in runs:
            assert record["spec"]["holder"] == runs[tick][0]
            checked += 1
    assert checked >= 1

    # Deleting the queue poller's owner (SIGTERM: it releases) hands the job to another pod.
    lease = job_lease_name("queue-poller")
    owner = poll(lambda: lease_holder(kind, lease), timeout=30, what="queue-poller owned")
    (owner_pod,) = [p for p in pods if owner.startswith(p)]
    kind.kubectl("delete", "pod", "-n", APP_NAMESPACE, owner_pod, "--wait=false")
    successor = poll(
        lambda: (h := lease_holder(kind, lease)) and not h.startswith(owner_pod) and h,
        timeout=60,
        what="queue-poller taken over by another pod",
    )
    assert successor != owner

    # The operator, running in the cluster from the loaded image, keeps the jobs' status.
    def last_run() -> dict[str, Any] | None:
        job = json.loads(
            kind.kubectl("get", "scheduledjob", "send-invoices", "-n", APP_NAMESPACE, "-o", "json")
        )
        found: dict[str, Any] | None = (job.get("status") or {}).get("lastRun")
        return found

    assert poll(last_run, timeout=60, what="lastRun in the job's status")["holder"]


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)
