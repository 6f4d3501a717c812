"""`leasecron bench guards`: N replica processes each run a `Guard` of their own identity,
called by a plain timer loop at each of T ticks (`--every` apart, aligned to the Unix epoch),
as an application's own scheduler would (`_through_guard`); once as a plain guard
(`every=`), once as a `job=` guard of a once-per-tick ScheduledJob of that schedule (a
JobRun per run), each in a fresh namespace of one cluster.

Figures per variant: bodies per tick (exactly one is the promise: ticks whose body ran more
than once are duplicates, ticks no body ran are never-run), tick -> body start lag (the
body's own wall-clock start minus its tick; every process reads one machine clock) p50 / p99
/ max, API writes per tick of all replicas together (each replica's `Kube.write_count` from
tick 0 on, by resource too), the requests standbys sent for the guard's Lease while they saw
another replica's grant on it live (and the seconds of such grants seen), the skip reasons,
and with `job=` the JobRuns found afterwards by outcome. `guards_report` is pure.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise
from typing import Any

from leasecron.bench import _runtime_ticks
from leasecron.bench._clusters import cluster
from leasecron.bench._drivers import bench_job
from leasecron.bench._processes import Message
from leasecron.bench._runs import BenchRun, bench_run, print_result
from leasecron.bench._stats import (
    account_ticks,
    merge_counts,
    percentile,
    rounded,
    show,
    table,
)
from leasecron.bench._through_runtime import BENCH_GROUP
from leasecron.bench._ticks import _collect
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore, ScheduledJobStore
from leasecron.models.durations import format_duration
from leasecron.models.names import GROUP, VERSION, parse_tick

VARIANTS = ("plain", "job")
STARTING_DEADLINE_S = 60.0
_LEAD_S = 3.0


@dataclass(frozen=True, kw_only=True)
class GuardResults:
    """What one variant observed: grant and done messages and, with `job=`, the JobRuns
    found afterwards by outcome."""

    grants: list[Message]
    done: list[Message]
    jobruns: dict[str, int] = field(default_factory=dict)


def _schedule(period: float) -> str:
    return f"@every {format_duration(timedelta(seconds=period))}"


def _job_body(period: float) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": bench_job(0)},
        "spec": {
            "bucket": "once-per-tick",
            "schedule": _schedule(period),
            "group": BENCH_GROUP,
            "startingDeadline": format_duration(timedelta(seconds=STARTING_DEADLINE_S)),
        },
    }


def pick_epoch(*, period: float, warm_up: int, now: float) -> float:
    """Tick 0: a multiple of `period` since the Unix epoch (the guard's ticks), far enough
    ahead for `warm_up` ticks and the replicas to hear of it."""
    return (math.ceil((now + _LEAD_S) / period) + warm_up) * period


def measure_guards(
    run: BenchRun,
    *,
    replicas: int,
    ticks: int,
    period: float,
    run_ms: float,
    stagger: float,
    job: bool,
    warm_up: int = 1,
) -> GuardResults:
    """Run the replicas through all ticks; what they reported."""
    if replicas < 1 or ticks < 1:
        raise ValueError(f"replicas and ticks must be >= 1: {replicas}, {ticks}")
    if period < 1.0 or period != int(period):
        raise ValueError(f"--every must be whole seconds, at least 1s: {period:g}s")
    if job:
        _runtime_ticks.apply_crds(run.kubeconfig)
        asyncio.run(
            _runtime_ticks.create_objects(
                run.kubeconfig, run.namespace, [_job_body(period)], ScheduledJobStore
            )
        )
        run.progress(f"ScheduledJob {bench_job(0)} created ({_schedule(period)})")
    names = [f"replica-{i}" for i in range(replicas)]
    for name in names:
        argv = ["guards", "--through", "guard", "--namespace", run.namespace]
        argv += ["--identity", name, "--ticks", str(ticks), "--period", str(period)]
        argv += ["--run-ms", str(run_ms), "--stagger", str(stagger), "--warm-up", str(warm_up)]
        run.group.spawn(name, argv + (["--job", bench_job(0)] if job else []))
    for name in names:
        run.group.wait_for(
            lambda m, n=name: m.replica == n and m.event == "ready",  # type: ignore[misc]
            timeout=120.0,
            what=f"{name} ready",
        )
    epoch = pick_epoch(period=period, warm_up=warm_up, now=time.time())
    for name in names:
        run.group.replicas[name].send({"epoch": epoch})
    run.progress(f"{replicas} replicas ready; {ticks} ticks {period:g}s apart from {epoch:.0f}")
    budget = (ticks + warm_up) * period + _LEAD_S + 60.0
    done = _collect(run, replicas=replicas, expected=ticks, budget=budget, finish_at=None)
    grants = [m for m in run.group.history if m.event == "grant"]
    jobruns = asyncio.run(_count_jobruns(run.kubeconfig, run.namespace, since=epoch)) if job else {}
    return GuardResults(grants=grants, done=done, jobruns=jobruns)


async def _count_jobruns(kubeconfig: str, namespace: str, *, since: float) -> dict[str, int]:
    """The JobRuns of ticks from `since` on, by outcome (`Running`: none yet); the warm-up
    ticks' runs are left out."""
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=1)
    try:
        runs = await JobRunStore(kube).list(namespace=namespace)
    finally:
        await kube.close()
    outcomes = Counter(
        str((r.get("status") or {}).get("outcome") or "Running")
        for r in runs
        if parse_tick(str((r.get("spec") or {}).get("tick", ""))).timestamp() >= since
    )
    return dict(sorted(outcomes.items()))


def guards_report(
    results: GuardResults, *, replicas: int, ticks: int, variant: str
) -> tuple[dict[str, Any], str]:
    """The JSON figures and the human table of one variant."""
    grants, done = results.grants, results.done
    account = account_ticks(((0, int(m.data["tick"])) for m in grants), jobs=1, ticks=ticks)
    per_tick = Counter(int(m.data["tick"]) for m in grants)
    lags_ms = [float(m.data["lag"]) * 1000.0 for m in grants]
    writes = sum(int(m.data["writes"]) for m in done)
    standby_requests = sum(int(m.data["standby_requests"]) for m in done)
    standby_seconds = sum(float(m.data["standby_seconds"]) for m in done)
    by_resource = merge_counts(m.data.get("writes_by", {}) for m in done)
    tokens = [int(m.data["token"]) for m in sorted(grants, key=lambda m: int(m.data["tick"]))]
    figures: dict[str, Any] = {
        "variant": variant,
        "replicas": replicas,
        "ticks": ticks,
        "bodies": account.runs,
        "ticks_with_one_body": sum(1 for n in per_tick.values() if n == 1),
        "duplicates": account.duplicates,
        "never_run": account.missed,
        "tokens_increasing": all(a < b for a, b in pairwise(tokens)),
        "start_lag_p50_ms": rounded(percentile(lags_ms, 0.5), 1),
        "start_lag_p99_ms": rounded(percentile(lags_ms, 0.99), 1),
        "start_lag_max_ms": rounded(max(lags_ms, default=math.nan), 1),
        "writes": writes,
        "writes_per_tick": rounded(writes / ticks),
        "writes_by_resource": by_resource,
        "requests": sum(int(m.data["requests"]) for m in done),
        "standby_requests": standby_requests,
        "standby_seconds": round(standby_seconds, 3),
        "bodies_per_replica": dict(sorted(Counter(m.replica for m in grants).items())),
        "skips": merge_counts(m.data.get("skips", {}) for m in done),
    }
    rows = [
        ("bodies", f"{account.runs} of {ticks}", "1 per tick"),
        ("ticks with exactly one body", show(figures["ticks_with_one_body"]), f"{ticks}"),
        ("duplicates (ticks run twice)", show(account.duplicates), "0"),
        ("never-run ticks", show(account.missed), "0"),
        ("tokens increase tick to tick", show(figures["tokens_increasing"]), "True"),
        ("tick -> body start p50", show(figures["start_lag_p50_ms"], " ms"), "-"),
        ("tick -> body start p99", show(figures["start_lag_p99_ms"], " ms"), "-"),
        ("tick -> body start max", show(figures["start_lag_max_ms"], " ms"), "-"),
        ("API writes per tick (all replicas)", show(figures["writes_per_tick"]), "-"),
        ("  of which", _by(by_resource, ticks), "-"),
        (
            "standby requests during live grants",
            f"{standby_requests} in {standby_seconds:.1f} s",
            "0",
        ),
        ("skips", _reasons(figures["skips"]), "-"),
    ]
    if variant == "job":
        found = sum(results.jobruns.values())
        outcomes = ", ".join(f"{k} {v}" for k, v in results.jobruns.items())
        figures["jobruns"] = results.jobruns
        rows.append(("JobRuns found", f"{found} ({outcomes})" if found else "0", f"{ticks}"))
    title = f"guards ({variant}): {replicas} replicas x {ticks} ticks"
    return figures, table(rows, title=title)


def _by(by_resource: dict[str, float], ticks: int) -> str:
    return ", ".join(f"{k} {v / ticks:.2f}" for k, v in by_resource.items()) or "-"


def _reasons(skips: dict[str, float]) -> str:
    return ", ".join(f"{k} {int(v)}" for k, v in skips.items()) or "-"


def run_guards(
    *,
    replicas: int,
    ticks: int,
    every: float = 1.0,
    run_ms: float = 100.0,
    stagger: float = 0.2,
    variants: tuple[str, ...] = VARIANTS,
    json_output: bool = False,
    kubeconfig: str | None = None,
) -> dict[str, Any]:
    """Run the guards benchmark for each of `variants`, print the tables (and JSON), and
    return the figures (one entry per variant)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(f"variants must be among {', '.join(VARIANTS)}: {', '.join(unknown)}")
    figures: dict[str, Any] = {"bench": "guards", "every_s": every, "run_ms": run_ms}
    humans = []
    with cluster(kubeconfig) as config:
        for variant in variants:
            with bench_run(prefix=f"guards-{variant}", through="guard", kubeconfig=config) as run:
                results = measure_guards(
                    run,
                    replicas=replicas,
                    ticks=ticks,
                    period=every,
                    run_ms=run_ms,
                    stagger=stagger,
                    job=variant == "job",
                )
            one, human = guards_report(results, replicas=replicas, ticks=ticks, variant=variant)
            figures[variant] = one
            humans.append(human)
    print_result(figures, "\n\n".join(humans), json_output=json_output)
    return figures
