"""Helpers for the operator's integration tests: the operator and replicas as subprocesses,
ScheduledJobs applied with the admin client, and polling with a deadline for what another
process does (there is no in-process event to wait on)."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api, CoreV1Api, CustomObjectsApi
from operator_rbac import chart_operator_kubeconfig

from leasecron.bench._operator_process import OperatorSubprocess
from leasecron.testing import ChildProcess
from leasecron.testing import poll as poll  # the tests import it from here
from leasecron.testing.handlers import scheduled_job

GROUP, VERSION = "leasecron.dev", "v1alpha1"

StartOperator = Callable[..., AbstractContextManager[OperatorSubprocess]]
"""The `start_operator` fixture: `running_operator` for the test's cluster, namespace and
directory."""
StartReplica = Callable[..., AbstractContextManager[ChildProcess]]
"""The `start_replica` fixture: `running_replica` for the test's cluster, namespace and
directory."""

REPLICA = """
import sys, time
from leasecron.runtime import Scheduler, Tuning

group, namespace, identity, seconds, handlers = sys.argv[1:6]
scheduler = Scheduler(
    group, namespace=namespace, identity=identity, grace_period=1.0,
    tuning=Tuning(member_duration_s=2, member_renew_every=0.5),
)

def work(ctx):
    print(f"run {ctx.job} {ctx.tick.isoformat()} {ctx.token}", flush=True)
    ctx.wait_lost(float(seconds))

for name in handlers.split(","):
    scheduler.register(name, work)
scheduler.run_forever()
"""


@contextlib.contextmanager
def running_operator(
    kubeconfig: Path, namespace: str, tmp_path: Path, *, name: str = "operator", **kwargs: Any
) -> Iterator[OperatorSubprocess]:
    """The operator watching `namespace` (its election Lease there too), once it leads. It
    runs as the chart's operator ServiceAccount with exactly the chart's RBAC (`kubeconfig`,
    the admin's, only sets that up: see operator_rbac)."""
    lease = kwargs.setdefault("election_lease", "leasecron-operator")
    credentials = chart_operator_kubeconfig(
        kubeconfig, namespace, tmp_path / f"{name}-rbac", election_lease=lease
    )
    with credentials as operator_kubeconfig:
        operator = OperatorSubprocess(
            kubeconfig=operator_kubeconfig,
            log_path=tmp_path / f"{name}.log",
            namespaces=[namespace],
            election_namespace=namespace,
            identity=name,
            **kwargs,
        )
        try:
            operator.wait(operator.leading, timeout=30, what="leading")
            yield operator
        finally:
            operator.stop()


@contextlib.contextmanager
def running_replica(
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    *,
    identity: str,
    group: str,
    handlers: str,
    run_seconds: float = 0.1,
) -> Iterator[ChildProcess]:
    """A replica: leasecron's Scheduler in its own process, each run taking `run_seconds`."""
    replica = ChildProcess(
        name=identity,
        argv=[
            sys.executable,
            "-c",
            REPLICA,
            group,
            namespace,
            identity,
            str(run_seconds),
            handlers,
        ],
        log_path=tmp_path / f"{identity}.log",
        env={"KUBECONFIG": str(kubeconfig)},
    )
    try:
        yield replica
    finally:
        replica.kill()


def apply_job(api: ApiClient, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = scheduled_job(name, namespace=namespace, **spec)
    created: dict[str, Any] = CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", body
    )
    return created


def get_job(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", name
    )
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


def job_condition(api: ApiClient, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    return condition(get_job(api, namespace, name), kind)


def jobruns(api: ApiClient, namespace: str) -> list[dict[str, Any]]:
    listed = CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "jobruns"
    )
    return list(listed["items"])


def outcomes(api: ApiClient, namespace: str) -> list[str]:
    return [str((run.get("status") or {}).get("outcome")) for run in jobruns(api, namespace)]


def leases(api: ApiClient, namespace: str) -> list[Any]:
    return list(CoordinationV1Api(api).list_namespaced_lease(namespace).items)


def events(api: ApiClient, namespace: str, reason: str) -> list[Any]:
    found = CoreV1Api(api).list_namespaced_event(namespace).items
    return [event for event in found if event.reason == reason]


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(operator: OperatorSubprocess, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of `name` on /metrics; fails when /metrics does not
    declare `name`, so that a renamed metric cannot pass for "nothing happened"."""
    status, body = operator.get("/metrics", port=operator.metrics_port)
    assert status == 200, body[:200]
    family = name.removesuffix("_total")
    declared = {line.split()[2] for line in body.splitlines() if line.startswith("# TYPE ")}
    assert family in declared or name in declared, f"/metrics declares no metric {name}"
    found: list[tuple[dict[str, str], float]] = []
    for line in body.splitlines():
        sample, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        if not line.startswith("#") and sample.strip() == name:
            found.append((dict(_LABEL.findall(rest)), float(line.rsplit(" ", 1)[1])))
    return found


def metric(operator: OperatorSubprocess, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`; fails on an unknown
    metric, and on a label name its samples do not have (a labelled family with no samples
    yet cannot be checked: that fails too)."""
    found = samples(operator, name)
    if labels:
        known = {key for sample, _ in found for key in sample}
        assert set(labels) <= known, f"{name} has no label {sorted(set(labels) - known)}"
    return sum(v for sample, v in found if all(sample.get(k) == x for k, x in labels.items()))
