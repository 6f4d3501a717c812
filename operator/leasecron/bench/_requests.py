"""`leasecron bench requests`: run-now latency. N replica processes run a Scheduler of group
`bench` with the benchmark job's handler (`_through_runtime.requests`); the parent makes R run
requests of one once-per-tick ScheduledJob, one after another, each through the code path of
`leasecron run` (its checks, then the create of the Pending JobRun; given as `make_request`,
since the command's code sits above the benchmarks), and follows each until its JobRun
finishes.

Figures: the time from the request's create being sent to the handler's own wall-clock start
in a replica, and to the JobRun's final outcome as the parent first reads it (read every
`_POLL_S`, so up to that much late), p50 / p99 / max; the checks' own time before the create;
handler starts per request (exactly one is the promise: a request started twice is a
duplicate, one never started is missed), and the JobRuns found afterwards by outcome. The
job's schedule fires once a year, so every run is a requested one. `requests_report` is pure.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from leasecron.bench import _runtime_ticks
from leasecron.bench._drivers import bench_job
from leasecron.bench._processes import BenchError, Message
from leasecron.bench._runs import BenchRun, bench_run, print_result
from leasecron.bench._stats import percentile, rounded, show, table
from leasecron.bench._through_runtime import BENCH_GROUP, HANDLER
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore, ScheduledJobStore
from leasecron.models.names import GROUP, VERSION
from leasecron.models.specs import Outcome

_POLL_S = 0.02
_FINISH_TIMEOUT_S = 30.0
_YEARLY = "0 0 1 1 *"
_FINAL = {o.value for o in Outcome} - {Outcome.PENDING.value, Outcome.RUNNING.value}


@dataclass(frozen=True, kw_only=True)
class RequestMade:
    """What `make_request` did: the request JobRun's name, its tick (epoch seconds), when the
    command's checks began and when the create was sent (wall time)."""

    name: str
    tick: float
    began: float
    sent: float


MakeRequest = Callable[[Kube, str, str], Awaitable[RequestMade]]
"""(kube, namespace, job) -> the request made, as `leasecron run` makes it."""


@dataclass(frozen=True, kw_only=True)
class Followed:
    """One request and what became of it: when the JobRun was first read final, and how."""

    made: RequestMade
    finished: float | None
    outcome: str


def _job_body() -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": bench_job(0)},
        "spec": {
            "bucket": "once-per-tick",
            "schedule": _YEARLY,
            "group": BENCH_GROUP,
            "handler": HANDLER,
        },
    }


async def _follow(kube: Kube, namespace: str, name: str) -> tuple[float | None, str]:
    """Read the JobRun until its outcome is final: (when it was read so, the outcome)."""
    store, end = JobRunStore(kube), time.monotonic() + _FINISH_TIMEOUT_S
    outcome = "missing"
    while time.monotonic() < end:
        obj = await store.get(namespace=namespace, name=name) or {}
        outcome = str((obj.get("status") or {}).get("outcome") or "missing")
        if outcome in _FINAL:
            return time.time(), outcome
        await asyncio.sleep(_POLL_S)
    return None, outcome


async def _make_all(
    run: BenchRun, make_request: MakeRequest, *, requests: int, job: str
) -> list[Followed]:
    kube = Kube.from_config(kubeconfig=run.kubeconfig, max_workers=4)
    followed: list[Followed] = []
    try:
        for i in range(requests):
            # one request per whole second (a request is the JobRun of its second)
            await asyncio.sleep(math.floor(time.time()) + 1.1 - time.time())
            made = await make_request(kube, run.namespace, job)
            finished, outcome = await _follow(kube, run.namespace, made.name)
            followed.append(Followed(made=made, finished=finished, outcome=outcome))
            if (i + 1) % 5 == 0:
                run.progress(f"{i + 1} of {requests} requests finished")
    finally:
        await kube.close()
    return followed


def measure_requests(
    run: BenchRun, make_request: MakeRequest, *, replicas: int, requests: int, run_ms: float
) -> tuple[list[Followed], list[Message]]:
    """Start the replicas, make the requests one after another; what became of each and the
    handler starts reported."""
    if replicas < 1 or requests < 1:
        raise ValueError(f"replicas and requests must be >= 1: {replicas}, {requests}")
    _runtime_ticks.apply_crds(run.kubeconfig)
    asyncio.run(
        _runtime_ticks.create_objects(
            run.kubeconfig, run.namespace, [_job_body()], ScheduledJobStore
        )
    )
    names = [f"replica-{i}" for i in range(replicas)]
    for name in names:
        argv = ["requests", "--through", "runtime", "--namespace", run.namespace]
        run.group.spawn(name, [*argv, "--identity", name, "--jobs", "1", "--run-ms", str(run_ms)])
    for name in names:
        run.group.wait_for(
            lambda m, n=name: m.replica == n and m.event == "synced",  # type: ignore[misc]
            timeout=120.0,
            what=f"{name} running {bench_job(0)}",
        )
    run.progress(f"{replicas} replicas run {bench_job(0)}; {requests} requests")
    followed = asyncio.run(_make_all(run, make_request, requests=requests, job=bench_job(0)))
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # the last start lines still in the pipes
        run.group.poll(timeout=0.1)
    starts = [m for m in run.group.history if m.event == "start"]
    if not followed:
        raise BenchError("no request was made")
    return followed, starts


def requests_report(
    followed: list[Followed], starts: list[Message], *, replicas: int
) -> tuple[dict[str, Any], str]:
    """The JSON figures and the human table of a requests run."""
    by_tick = Counter(round(float(m.data["tick"])) for m in starts)
    first_start: dict[int, float] = {}
    for m in starts:
        tick = round(float(m.data["tick"]))
        first_start[tick] = min(first_start.get(tick, math.inf), float(m.data["t"]))
    to_start, to_finish, checks = [], [], []
    for f in followed:
        tick = round(f.made.tick)
        checks.append((f.made.sent - f.made.began) * 1000.0)
        if tick in first_start:
            to_start.append((first_start[tick] - f.made.sent) * 1000.0)
        if f.finished is not None:
            to_finish.append((f.finished - f.made.sent) * 1000.0)
    ticks = {round(f.made.tick) for f in followed}
    outcomes = dict(sorted(Counter(f.outcome for f in followed).items()))
    figures: dict[str, Any] = {
        "bench": "requests",
        "replicas": replicas,
        "requests": len(followed),
        "started": sum(1 for t in ticks if by_tick.get(t, 0) >= 1),
        "duplicates": sum(1 for t in ticks if by_tick.get(t, 0) > 1),
        "never_started": sum(1 for t in ticks if by_tick.get(t, 0) == 0),
        "starts_not_requested": sum(n for t, n in by_tick.items() if t not in ticks),
        "outcomes": outcomes,
        "checks_p50_ms": rounded(percentile(checks, 0.5), 1),
        "to_start_p50_ms": rounded(percentile(to_start, 0.5), 1),
        "to_start_p99_ms": rounded(percentile(to_start, 0.99), 1),
        "to_start_max_ms": rounded(max(to_start, default=math.nan), 1),
        "to_finish_p50_ms": rounded(percentile(to_finish, 0.5), 1),
        "to_finish_p99_ms": rounded(percentile(to_finish, 0.99), 1),
        "to_finish_max_ms": rounded(max(to_finish, default=math.nan), 1),
        "starts_per_replica": dict(sorted(Counter(m.replica for m in starts).items())),
    }
    n = len(followed)
    rows = [
        ("requests started", f"{figures['started']} of {n}", "all, once each"),
        ("duplicates (started twice)", show(figures["duplicates"]), "0"),
        ("never started", show(figures["never_started"]), "0"),
        ("handler starts of no request", show(figures["starts_not_requested"]), "0"),
        ("JobRun outcomes", ", ".join(f"{k} {v}" for k, v in outcomes.items()), f"Succeeded {n}"),
        ("`run` checks before the create p50", show(figures["checks_p50_ms"], " ms"), "-"),
        ("create -> handler start p50", show(figures["to_start_p50_ms"], " ms"), "-"),
        ("create -> handler start p99", show(figures["to_start_p99_ms"], " ms"), "-"),
        ("create -> handler start max", show(figures["to_start_max_ms"], " ms"), "-"),
        ("create -> JobRun finished p50", show(figures["to_finish_p50_ms"], " ms"), "-"),
        ("create -> JobRun finished p99", show(figures["to_finish_p99_ms"], " ms"), "-"),
    ]
    return figures, table(rows, title=f"requests: {replicas} replicas x {n} run requests")


def run_requests(
    *,
    make_request: MakeRequest,
    replicas: int,
    requests: int,
    run_ms: float = 100.0,
    json_output: bool = False,
    kubeconfig: str | None = None,
) -> dict[str, Any]:
    """Run the requests benchmark, print its table (and JSON), and return the figures."""
    with bench_run(prefix="requests", through="runtime", kubeconfig=kubeconfig) as run:
        followed, starts = measure_requests(
            run, make_request, replicas=replicas, requests=requests, run_ms=run_ms
        )
    figures, human = requests_report(followed, starts, replicas=replicas)
    figures["run_ms"] = run_ms
    print_result(figures, human, json_output=json_output)
    return figures
