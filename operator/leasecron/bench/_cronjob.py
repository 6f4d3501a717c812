"""`leasecron bench cronjob`: the Kubernetes CronJob controller on the same machine, the anchor
the tick figures are compared with (DESIGN.md section 8).

It starts a kube-controller-manager of its own from the control plane's binaries with only
`cronjob-controller` (no leader election, no serving port), creates N CronJobs on one minute
(`* * * * *`, `suspend: false`) whose Jobs are suspended (they need no pods: there is no
kubelet), and measures per Job its creationTimestamp minus its
`batch.kubernetes.io/cronjob-scheduled-timestamp` annotation, for the `minutes` whole minutes
after the last CronJob was created. creationTimestamp has whole seconds, so a lag is read up
to 1 s short. Each flag set (`FLAG_SETS`) runs in a namespace of its own, one after the other;
its CronJobs and Jobs are deleted before the next one starts.

It measures the controller of this control plane: against a cluster whose own controller
manager runs the CronJob controller, both would create the Jobs.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from leasecron.bench._clusters import bench_namespace, cluster, progress
from leasecron.bench._processes import BenchError
from leasecron.bench._runs import print_result
from leasecron.bench._runtime_ticks import create_objects
from leasecron.bench._stats import percentile, rounded, show, table
from leasecron.kube.clients import Kube

SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
GENEROUS_FLAGS = ("--kube-api-qps=1000", "--kube-api-burst=1000", "--concurrent-cron-job-syncs=50")
FLAG_SETS: dict[str, tuple[str, ...]] = {"default": (), "generous": GENEROUS_FLAGS}
_READY_LINE = "Starting cronjob controller"
_CREATE_MARGIN_S = 10.0
_CREATE_PER_JOB_S = 0.01


def cronjob_body(index: int) -> dict[str, Any]:
    """CronJob `index` of the benchmark: every minute, its Jobs suspended (no pod ever)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": f"bench-cron-{index}"},
        "spec": {
            "schedule": "* * * * *",
            "suspend": False,
            "jobTemplate": {
                "spec": {
                    "suspend": True,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "noop", "image": "registry.invalid/noop"}],
                        }
                    },
                }
            },
        },
    }


def controller_argv(binary: str, kubeconfig: str, flags: Sequence[str]) -> list[str]:
    """kube-controller-manager running the CronJob controller alone, with `flags` added."""
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        "--controllers=cronjob-controller",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--secure-port=0",
        *flags,
    ]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def job_lags(jobs: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(scheduled instant, creationTimestamp minus it) of every Job the controller made."""
    lags = []
    for job in jobs:
        metadata = job.get("metadata") or {}
        scheduled = (metadata.get("annotations") or {}).get(SCHEDULED_ANNOTATION)
        created = metadata.get("creationTimestamp")
        if scheduled and created:
            lags.append((_epoch(scheduled), _epoch(created) - _epoch(scheduled)))
    return lags


def measured_minutes(created_by: float, minutes: int) -> list[float]:
    """The `minutes` whole minutes (epoch seconds) after `created_by`."""
    first = (int(created_by) // 60 + 1) * 60
    return [float(first + 60 * i) for i in range(minutes)]


def cronjob_figures(
    lags: Sequence[tuple[float, float]], *, jobs: int, minutes: Sequence[float], flags: str
) -> dict[str, Any]:
    """The figures of one flag set: runs that appeared for the measured minutes, lag
    percentiles (seconds), runs of other minutes (created for a minute before the window)."""
    window = set(minutes)
    inside = [lag for at, lag in lags if at in window]
    return {
        "bench": "cronjob",
        "flags": flags,
        "cronjobs": jobs,
        "minutes": len(minutes),
        "expected": jobs * len(minutes),
        "appeared": len(inside),
        "missing": jobs * len(minutes) - len(inside),
        "other_minutes": len(lags) - len(inside),
        "lag_p50_s": rounded(percentile(inside, 0.5), 1),
        "lag_p99_s": rounded(percentile(inside, 0.99), 1),
        "lag_max_s": rounded(max(inside, default=float("nan")), 1),
    }


def cronjob_table(figures: dict[str, Any]) -> str:
    rows = [
        ("Jobs appeared", f"{figures['appeared']} of {figures['expected']}", "-"),
        ("creation lag p50", show(figures["lag_p50_s"], " s"), "-"),
        ("creation lag p99", show(figures["lag_p99_s"], " s"), "-"),
        ("creation lag max", show(figures["lag_max_s"], " s"), "-"),
    ]
    title = (
        f"CronJob controller ({figures['flags']} flags): {figures['cronjobs']} CronJobs on one "
        f"minute x {figures['minutes']} minutes"
    )
    return table(rows, title=title)


@contextmanager
def controller_manager(kubeconfig: str, flags: Sequence[str], log: Path) -> Iterator[None]:
    """A kube-controller-manager with the CronJob controller alone, stopped on exit."""
    from leasecron.testing import find_assets

    binary = str(find_assets().binary("kube-controller-manager"))
    with log.open("wb") as out:
        process = subprocess.Popen(
            controller_argv(binary, kubeconfig, flags),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60.0
        while _READY_LINE.encode() not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"kube-controller-manager not started; see {log}")
            time.sleep(0.2)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class _CronJobs:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"/apis/batch/v1/namespaces/{namespace}/cronjobs"
        return await self.kube.request("POST", path, body=body)


async def _jobs(kubeconfig: str, namespace: str) -> list[dict[str, Any]]:
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=1, request_timeout=60.0)
    try:
        answer = await kube.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")
        return list(answer.get("items") or [])
    finally:
        await kube.close()


async def _delete_all(kubeconfig: str, namespace: str) -> None:
    """Delete the CronJobs and Jobs (no namespace controller may be running to do it)."""
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=1, request_timeout=120.0)
    try:
        for plural in ("cronjobs", "jobs"):
            path = f"/apis/batch/v1/namespaces/{namespace}/{plural}"
            await kube.request("DELETE", path, query={"propagationPolicy": "Background"})
    finally:
        await kube.close()


def measure_cronjob(
    kubeconfig: str, *, jobs: int, minutes: int, flags: str, workdir: Path
) -> dict[str, Any]:
    """One flag set: controller started, CronJobs created, `minutes` minutes measured."""
    with (
        bench_namespace(kubeconfig, prefix=f"bench-cronjob-{flags}") as namespace,
        controller_manager(kubeconfig, FLAG_SETS[flags], workdir / f"kcm-{flags}.log"),
    ):
        needed = _CREATE_MARGIN_S + jobs * _CREATE_PER_JOB_S
        if 60.0 - time.time() % 60.0 < needed:  # start right after a boundary instead
            time.sleep(60.0 - time.time() % 60.0 + 0.5)
        began = time.time()
        bodies = [cronjob_body(i) for i in range(jobs)]
        asyncio.run(create_objects(kubeconfig, namespace, bodies, _CronJobs))
        window = measured_minutes(time.time(), minutes)
        progress(
            f"{flags} flags: {jobs} CronJobs created in {time.time() - began:.1f}s; measuring "
            f"the {minutes} minute(s) from {datetime.fromtimestamp(window[0]):%H:%M}"
        )
        # Each minute's Jobs may appear until the next minute supersedes it.
        until = window[-1] + 60.0
        while time.time() < until:
            time.sleep(min(5.0, max(0.0, until - time.time())))
            seen = asyncio.run(_jobs(kubeconfig, namespace))
            if len([at for at, _ in job_lags(seen) if at in window]) >= jobs * minutes:
                break
        lags = job_lags(asyncio.run(_jobs(kubeconfig, namespace)))
    asyncio.run(_delete_all(kubeconfig, namespace))
    return cronjob_figures(lags, jobs=jobs, minutes=window, flags=flags)


def run_cronjob(
    *,
    jobs: int,
    minutes: int = 1,
    flag_sets: Sequence[str] = ("default", "generous"),
    json_output: bool = False,
    kubeconfig: str | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Measure the CronJob controller with each flag set; print tables (and JSON)."""
    if jobs < 1 or minutes < 1:
        raise ValueError(f"jobs and minutes must be >= 1: {jobs}, {minutes}")
    unknown = [f for f in flag_sets if f not in FLAG_SETS]
    if unknown:
        raise ValueError(f"unknown flag sets {unknown}; known: {', '.join(FLAG_SETS)}")
    import tempfile

    logs = workdir or Path(tempfile.mkdtemp(prefix="leasecron-bench-cronjob-"))
    results = []
    with cluster(kubeconfig) as config:
        for flags in flag_sets:
            results.append(
                measure_cronjob(config, jobs=jobs, minutes=minutes, flags=flags, workdir=logs)
            )
    figures = {"bench": "cronjob", "runs": results}
    print_result(figures, "\n".join(cronjob_table(r) for r in results), json_output=json_output)
    return figures
