"""The setup of `leasecron bench ticks --through runtime`: leasecron's CRDs, the benchmark's
ScheduledJobs and the tick instants they fire at.

Every job gets a 6-field cron schedule that fires exactly at the benchmark's ticks (seconds
`s..s+ticks-1` of one minute), so nothing runs before or after the measured window; jobs are
once-per-tick ones with the default spec (no lock settings, startingDeadline 60s), claimed
through their group's shard Leases like every once-per-tick job. The parent picks the epoch far
enough ahead for the replicas to see every job first, and counts the JobRuns afterwards.

With a warm-up, one more job per shard (`warm_up_jobs`) fires once `WARM_UP_S` before tick 0,
so the group record and every shard Lease exist and have a claimed instant before the
measured ticks, as in a group that has been running; without it, tick 0 is the group's first
instant (each shard Lease created by its first claim).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from leasecron.bench._drivers import bench_job
from leasecron.bench._through_runtime import BENCH_GROUP, HANDLER
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore, ScheduledJobStore
from leasecron.models.shards import shard_of

_LEAD_S = 5.0
WARM_UP_S = 5.0
_AT_REST_S = 10.0
"""With a warm-up, how long the replicas have after the jobs are created and seen before the
warm-up instant: a warmed-up run measures a group at rest, not one still digesting the burst
of new jobs."""
_LEAD_PER_JOB_S = 0.01
"""Creating the jobs and every replica seeing them: 2000 jobs take about 13 s here (155/s,
with 5 replicas watching), two thirds of this lead."""


def apply_crds(kubeconfig: str) -> None:
    """leasecron's CRDs in the cluster (waits until they are Established)."""
    import kubernetes.config

    from leasecron.testing import apply_leasecron_crds

    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    with api:
        apply_leasecron_crds(api)


def pick_epoch(
    *, jobs: int, ticks: int, period: float, warm_up: bool = False, now: float | None = None
) -> float:
    """The wall time of tick 0: whole seconds, far enough ahead (with `warm_up`, for the
    group to be at rest by the warm-up instant `WARM_UP_S` before it), all ticks in one
    minute."""
    if period != 1.0 or ticks > 59:
        raise ValueError(f"the runtime driver needs 1 s ticks and at most 59 of them: {ticks}")
    lead = _LEAD_S + jobs * _LEAD_PER_JOB_S + (_AT_REST_S + WARM_UP_S if warm_up else 0.0)
    epoch = math.ceil((now if now is not None else time.time()) + lead)
    while datetime.fromtimestamp(epoch, UTC).second + ticks > 60:
        epoch += 1
    return float(epoch)


def tick_schedule(epoch: float, ticks: int) -> str:
    """A 6-field cron (seconds first) firing at epoch, epoch + 1 s, ..., in UTC."""
    at = datetime.fromtimestamp(epoch, UTC)
    seconds = f"{at.second}-{at.second + ticks - 1}" if ticks > 1 else str(at.second)
    return f"{seconds} {at.minute} {at.hour} {at.day} {at.month} *"


class ObjectCreator(Protocol):
    async def create(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...


async def create_objects(
    kubeconfig: str,
    namespace: str,
    bodies: Iterable[dict[str, Any]],
    store: Callable[[Kube], ObjectCreator],
) -> None:
    """Create `bodies` in `namespace` through `store(kube)`, 16 at a time."""
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=16)
    creator, gate = store(kube), asyncio.Semaphore(16)

    async def create(body: dict[str, Any]) -> None:
        async with gate:
            await creator.create(namespace=namespace, body=body)

    try:
        await asyncio.gather(*(create(body) for body in bodies))
    finally:
        await kube.close()


def warm_up_jobs(shards: int) -> list[str]:
    """One job name per shard of a group with `shards` shards (`warmup-<n>`, the first n
    that hashes to each shard), in shard order."""
    names: dict[int, str] = {}
    n = 0
    while len(names) < shards:
        names.setdefault(shard_of(f"warmup-{n}", shards=shards), f"warmup-{n}")
        n += 1
    return [names[i] for i in range(shards)]


def _job(name: str, schedule: str) -> dict[str, Any]:
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name},
        "spec": {
            "bucket": "once-per-tick",
            "schedule": schedule,
            "group": BENCH_GROUP,
            "handler": HANDLER,
        },
    }


def create_jobs(
    kubeconfig: str,
    namespace: str,
    *,
    jobs: int,
    epoch: float,
    ticks: int,
    warm_up: list[str] | None = None,
) -> None:
    """The benchmark's ScheduledJobs, firing at the `ticks` instants from `epoch`, and the
    `warm_up` jobs firing once `WARM_UP_S` before it."""
    schedule = tick_schedule(epoch, ticks)
    bodies = [_job(name, tick_schedule(epoch - WARM_UP_S, 1)) for name in warm_up or []]
    bodies += [_job(bench_job(index), schedule) for index in range(jobs)]
    asyncio.run(create_objects(kubeconfig, namespace, bodies, ScheduledJobStore))


def count_jobruns(kubeconfig: str, namespace: str) -> dict[str, int]:
    """The JobRuns of the benchmark's jobs in `namespace` by outcome (`Running` for one without
    an outcome yet); warm-up jobs' runs are left out."""

    async def count() -> dict[str, int]:
        kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=1, request_timeout=120.0)
        try:
            runs = await JobRunStore(kube).list(namespace=namespace)
        finally:
            await kube.close()
        outcomes = Counter(
            str((r.get("status") or {}).get("outcome") or "Running")
            for r in runs
            if str((r.get("spec") or {}).get("job", "")).startswith("bench-")
        )
        return dict(sorted(outcomes.items()))

    return asyncio.run(count())
