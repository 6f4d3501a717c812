"""`leasecron bench operator`: apply N ScheduledJobs and time how long the operator takes to
make them all Ready, then measure its steady CPU and RSS.

Two figures for readiness: *apply → all Ready* (the operator is running, the jobs are created
then) and *cold start → all Ready* (the jobs exist, the operator process starts). Readiness
needs a live replica covering the handler, so the benchmark writes one member Lease that
stays live for the whole run (no replica process competes for the two cores). Steady CPU and
RSS are read from /proc for the operator process over a quiet window after all jobs are Ready.

The operator runs as a child process (`_operator_process.OperatorSubprocess`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from leasecron.bench._operator_process import OperatorSubprocess
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError
from leasecron.kube.jobruns import ScheduledJobStore
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer
from leasecron.models.leases import LeaseRecord, lease_body
from leasecron.models.names import (
    ANNOTATION_HANDLERS,
    API_VERSION,
    LABEL_GROUP,
    LABEL_ROLE,
    member_lease_name,
)

BENCH_GROUP = "bench"
BENCH_HANDLER = "bench_job"
PRODUCTION_TIMING = {"lease_duration": "15s", "renew_deadline": "10s", "retry_period": "2s"}
"""The chart's election timings: the benchmark measures the operator as it is deployed."""


# --- the benchmark ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Phase:
    """How long N jobs took to become Ready, and the API calls it cost."""

    seconds: float
    status_patches: float
    create_seconds: float = 0.0


def _job(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "bucket": "once-per-tick",
            "schedule": "0 3 1 1 *",  # yearly: no tick during the run
            "group": BENCH_GROUP,
            "handler": BENCH_HANDLER,
        },
    }


def _member(namespace: str) -> dict[str, Any]:
    """A member Lease that stays live for an hour: one replica covering the handler."""
    now = datetime.now(UTC)
    identity = "bench-replica"
    record = LeaseRecord(
        name=member_lease_name(BENCH_GROUP, identity),
        namespace=namespace,
        holder=identity,
        lease_duration_s=3600,
        acquire_time=now,
        renew_time=now,
    )
    body = lease_body(record, labels={LABEL_GROUP: BENCH_GROUP, LABEL_ROLE: "member"})
    body["metadata"]["annotations"] = {ANNOTATION_HANDLERS: json.dumps([BENCH_HANDLER])}
    return body


def _is_ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class _ReadyCounter:
    """Which ScheduledJobs of a namespace are Ready, kept from a watch."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.informer: Informer = ScheduledJobStore(kube).informer(namespace=namespace)
        self.ready: set[str] = set()
        self.informer.subscribe(self._event)

    def _event(self, event: Any) -> None:
        name = str((event.obj.get("metadata") or {}).get("name") or "")
        if event.type != "DELETED" and name and _is_ready(event.obj):
            self.ready.add(name)
        else:
            self.ready.discard(name)

    async def wait(self, count: int, *, operator: OperatorSubprocess, limit_s: float) -> None:
        """Until `count` jobs are Ready; RuntimeError if the operator exits first."""
        deadline = time.monotonic() + limit_s
        while not await self.informer.wait_for(lambda: len(self.ready) >= count, timeout=1.0):
            if operator.exit_code() is not None:
                raise RuntimeError(
                    f"the operator exited ({operator.exit_code()}) with {len(self.ready)} of "
                    f"{count} jobs Ready:\n{operator.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.ready)} of {count} jobs Ready after {limit_s}s")


async def _create_all(kube: Kube, bodies: list[dict[str, Any]], *, namespace: str) -> None:
    store = ScheduledJobStore(kube)
    slots = asyncio.Semaphore(16)

    async def create(body: dict[str, Any]) -> None:
        async with slots:
            await store.create(namespace=namespace, body=body)

    await asyncio.gather(*(create(body) for body in bodies))


async def _namespace(kube: Kube, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.request("POST", "/api/v1/namespaces", body=body)
    await LeaseStore(kube).create(namespace=name, body=_member(name))


def _steady(operator: OperatorSubprocess, *, seconds: float) -> dict[str, float]:
    cpu_before, wall_before = operator.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    cpu = operator.cpu_seconds() - cpu_before
    return {
        "steady_cpu_percent": round(100 * cpu / (time.monotonic() - wall_before), 2),
        "rss_mb": round(operator.rss_bytes() / 2**20, 1),
    }


async def _phase_apply(
    kube: Kube, operator: OperatorSubprocess, namespace: str, jobs: int, limit_s: float
) -> _Phase:
    counter = _ReadyCounter(kube, namespace)
    await counter.informer.start()
    try:
        patches = operator.metric("leasecron_operator_status_patches_total")
        started = time.monotonic()
        bodies = [_job(f"job-{i:05d}", namespace) for i in range(jobs)]
        _progress(f"creating {jobs} ScheduledJobs with the operator running")
        await _create_all(kube, bodies, namespace=namespace)
        created = time.monotonic() - started
        _progress(f"created in {created:.1f}s; waiting until all are Ready")
        await counter.wait(jobs, operator=operator, limit_s=limit_s)
        seconds = time.monotonic() - started
        spent = operator.metric("leasecron_operator_status_patches_total") - patches
        return _Phase(seconds=seconds, status_patches=spent, create_seconds=created)
    finally:
        await counter.informer.stop()


async def _phase_cold(
    kube: Kube, kubeconfig: str, workdir: Path, namespace: str, jobs: int, limit_s: float
) -> tuple[_Phase, OperatorSubprocess]:
    bodies = [_job(f"job-{i:05d}", namespace) for i in range(jobs)]
    _progress(f"creating {jobs} ScheduledJobs with no operator running")
    await _create_all(kube, bodies, namespace=namespace)
    _progress("starting the operator; waiting until all are Ready")
    counter = _ReadyCounter(kube, namespace)
    await counter.informer.start()
    try:
        started = time.monotonic()
        operator = OperatorSubprocess(
            kubeconfig=kubeconfig,
            log_path=workdir / "operator-cold.log",
            namespaces=[namespace],
            election_lease=f"leasecron-bench-{namespace}",
            **PRODUCTION_TIMING,
        )
        try:
            await counter.wait(jobs, operator=operator, limit_s=limit_s)
        except BaseException:
            operator.stop()
            raise
        seconds = time.monotonic() - started
        patches = operator.metric("leasecron_operator_status_patches_total")
        return _Phase(seconds=seconds, status_patches=patches), operator
    finally:
        await counter.informer.stop()


async def _bench(kubeconfig: str, workdir: Path, jobs: int, limit_s: float) -> dict[str, Any]:
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=16)
    suffix = secrets.token_hex(3)
    warm_ns, cold_ns = f"bench-operator-{suffix}", f"bench-operator-cold-{suffix}"
    try:
        await _namespace(kube, warm_ns)
        await _namespace(kube, cold_ns)
        operator = OperatorSubprocess(
            kubeconfig=kubeconfig,
            log_path=workdir / "operator.log",
            namespaces=[warm_ns],
            election_lease=f"leasecron-bench-{warm_ns}",
            **PRODUCTION_TIMING,
        )
        try:
            operator.wait(operator.leading, timeout=60, what="leading")
            warm = await _phase_apply(kube, operator, warm_ns, jobs, limit_s)
            _progress("measuring steady CPU and RSS for 20s")
            steady = await asyncio.to_thread(_steady, operator, seconds=20.0)
        finally:
            operator.stop()
        cold, cold_operator = await _phase_cold(kube, kubeconfig, workdir, cold_ns, jobs, limit_s)
        try:
            cold_steady = await asyncio.to_thread(_steady, cold_operator, seconds=20.0)
        finally:
            cold_operator.stop()
        return {
            "benchmark": "operator",
            "jobs": jobs,
            "apply_to_all_ready_s": round(warm.seconds, 2),
            "creating_the_jobs_s": round(warm.create_seconds, 2),
            "cold_start_to_all_ready_s": round(cold.seconds, 2),
            "status_patches_apply": warm.status_patches,
            "status_patches_cold_start": cold.status_patches,
            "steady_cpu_percent": steady["steady_cpu_percent"],
            "rss_mb": steady["rss_mb"],
            "cold_steady_cpu_percent": cold_steady["steady_cpu_percent"],
            "cold_rss_mb": cold_steady["rss_mb"],
            "target_cold_start_s": 60,
        }
    finally:
        for ns in (warm_ns, cold_ns):
            with contextlib.suppress(KubeError):
                await kube.request("DELETE", f"/api/v1/namespaces/{ns}")
        await kube.close()


@contextlib.contextmanager
def _cluster(kubeconfig: str | None) -> Iterator[str]:
    """The kubeconfig to use: the given one (CRDs applied), else a throwaway control plane."""
    from leasecron.testing import ControlPlane, apply_leasecron_crds

    if kubeconfig is not None:
        import kubernetes.config

        api = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
        with api:
            apply_leasecron_crds(api)
        yield kubeconfig
        return
    with ControlPlane() as plane, plane.api_client() as api:
        apply_leasecron_crds(api)
        yield str(plane.kubeconfig)


def run_operator_bench(*, jobs: int, kubeconfig: str | None, json_output: bool) -> dict[str, Any]:
    """Apply `jobs` ScheduledJobs and report the time to all Ready (with the operator running,
    and from the operator's cold start) and the operator's steady CPU and RSS. Prints the
    figures (JSON with `json_output`) and returns them."""
    if jobs < 1:
        raise ValueError(f"jobs ({jobs}) must be at least 1")
    timeout = max(120.0, jobs * 0.3)
    workdir = Path(tempfile.mkdtemp(prefix="leasecron-bench-operator-"))
    try:
        with _cluster(kubeconfig) as config:
            result = asyncio.run(_bench(config, workdir, jobs, timeout))
    except BaseException:
        print(f"operator logs kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key.ljust(width)}  {value}")
    if json_output:
        print(json.dumps(result))
    return result


def _progress(message: str) -> None:
    print(f"[bench operator] {message}", file=sys.stderr, flush=True)
