"""`leasecron bench ticks`: N replica processes contend for the ticks of J once-per-tick jobs,
T ticks one second apart: through the whole runtime (`--through runtime`: Schedulers on
default-spec ScheduledJobs, claimed through the group's shard Leases, JobRuns written) or
through the `TickLock` primitive alone (`--through coordination`: one Lease per job).

Figures: runs (grants), duplicates (ticks granted more than once), missed (never granted),
runs started past the startingDeadline, start lag (the handler's own wall-clock start in the
replica minus the tick instant; every process reads the same machine clock), API writes per
run (POST, PUT, PATCH, DELETE of all replicas during the ticks, from each replica's `Kube`
counters, divided by runs) and standby requests per second (requests a replica sent for a
Lease while it saw a live grant of another replica on it, per second of such grants seen).
Through the runtime also: the time from the last tick until every replica's JobRuns were
written, the JobRuns found afterwards by outcome, the API writes per run by verb and resource,
the lines the runs appended to their replicas' ledger files, replica RSS and CPU; with
`at_rest`, each replica's requests and watch events per minute with no tick due; with
`cpu_hogs`, that many busy processes share the machine from the replicas' sync until every
replica is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from leasecron.bench import _runtime_ticks
from leasecron.bench._clusters import cluster
from leasecron.bench._cronjob import run_cronjob
from leasecron.bench._drivers import bench_job
from leasecron.bench._processes import BenchError, Message
from leasecron.bench._runs import BenchRun, bench_run, print_result
from leasecron.bench._stats import (
    account_ticks,
    merge_counts,
    percentile,
    rounded,
    show,
    table,
)
from leasecron.coordination import default_labels
from leasecron.kube.leases import LeaseStore
from leasecron.models.leases import LeaseRecord, lease_body
from leasecron.models.names import job_lease_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.models.vocabulary import Role

PERIOD_S = 1.0
STARTING_DEADLINE_S = 60.0  # the ScheduledJob default; a tick not started by then is missed


@dataclass(frozen=True, kw_only=True)
class TickResults:
    """What one ticks run observed: grant and done messages, tick 0's wall time and, through
    the runtime, the JobRuns found afterwards by outcome."""

    grants: list[Message]
    done: list[Message]
    epoch: float
    jobruns: dict[str, int] = field(default_factory=dict)
    ledger: tuple[int, int] | None = None
    """Through the runtime: (lines, distinct job ticks) the runs appended to the ledgers."""


def _argv(run: BenchRun, name: str, members: list[str], options: dict[str, Any]) -> list[str]:
    argv = ["ticks", "--through", run.through, "--namespace", run.namespace, "--identity", name]
    argv += ["--members", ",".join(members), "--period", str(PERIOD_S)]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def _free_job_leases(namespace: str, jobs: int) -> list[dict[str, Any]]:
    """Free Leases of the jobs' own TickLocks (role `shard`, as a TickLock writes it), so the
    first tick is claimed like every other one (an update, not a race of creates)."""
    return [
        lease_body(
            LeaseRecord(name=job_lease_name(bench_job(index)), namespace=namespace),
            labels=default_labels(Role.SHARD),
        )
        for index in range(jobs)
    ]


def measure_ticks(
    run: BenchRun,
    *,
    replicas: int,
    jobs: int,
    ticks: int,
    run_ms: float,
    claim_step: float,
    shards: int = DEFAULT_SHARDS,
    warm_up: bool = False,
    at_rest: float = 0.0,
    cpu_hogs: int = 0,
) -> TickResults:
    """Run the replicas through all ticks; what they reported."""
    if replicas < 1 or jobs < 1 or ticks < 1:
        raise ValueError(f"replicas, jobs and ticks must be >= 1: {replicas}, {jobs}, {ticks}")
    names = [f"replica-{i}" for i in range(replicas)]
    options: dict[str, Any] = {
        "jobs": jobs,
        "ticks": ticks,
        "run_ms": run_ms,
        "claim_step": claim_step,
        "starting_deadline": STARTING_DEADLINE_S,
    }
    warm_up_jobs = _runtime_ticks.warm_up_jobs(shards) if warm_up else []
    ledger = run.workdir / "ledger"
    if run.through == "runtime":
        options["shards"] = shards
        options["warm_up_jobs"] = len(warm_up_jobs)
        options["at_rest"] = at_rest
        ledger.mkdir()
        options["ledger"] = ledger
        _runtime_ticks.apply_crds(run.kubeconfig)
    else:
        leases = _free_job_leases(run.namespace, jobs)
        asyncio.run(
            _runtime_ticks.create_objects(run.kubeconfig, run.namespace, leases, LeaseStore)
        )
        run.progress(f"{jobs} free job Leases created")
    for name in names:
        run.group.spawn(name, _argv(run, name, names, options))
    for name in names:
        run.group.wait_for(
            lambda m, n=name: m.replica == n and m.event == "ready",  # type: ignore[misc]
            timeout=120.0,
            what=f"{name} ready",
        )
    if run.through == "runtime":
        epoch = _runtime_ticks.pick_epoch(
            jobs=jobs, ticks=ticks, period=PERIOD_S, warm_up=bool(warm_up_jobs)
        )
        _runtime_ticks.create_jobs(
            run.kubeconfig,
            run.namespace,
            jobs=jobs,
            epoch=epoch,
            ticks=ticks,
            warm_up=warm_up_jobs,
        )
        warm = f", {len(warm_up_jobs)} warm-up jobs" if warm_up_jobs else ""
        run.progress(f"{jobs} ScheduledJobs created ({shards} shards{warm})")
    else:
        epoch = math.ceil(time.time()) + 2.0
    for name in names:
        run.group.replicas[name].send({"epoch": epoch})
    if run.through == "runtime":
        for name in names:
            run.group.wait_for(
                lambda m, n=name: m.replica == n and m.event == "synced",  # type: ignore[misc]
                timeout=max(1.0, epoch - time.time()),
                what=f"{name} running all {jobs} jobs before the first tick",
            )
    run.progress(f"{replicas} replicas ready; {ticks} ticks of {jobs} jobs from epoch {epoch:.0f}")
    hogs = contextlib.ExitStack()
    if cpu_hogs:
        hogs.enter_context(_cpu_hogs(cpu_hogs))
        run.progress(f"{cpu_hogs} CPU hog processes started")
    budget = ticks * PERIOD_S + STARTING_DEADLINE_S + 120.0 + jobs * 0.05
    # Through the runtime a replica cannot tell when the instant's last run has started (a
    # run may start until its startingDeadline): the parent says so, once it has seen every
    # start or once the deadline of the last tick has passed.
    finish_at = None
    if run.through == "runtime":
        finish_at = epoch + (ticks - 1) * PERIOD_S + STARTING_DEADLINE_S + run_ms / 1000.0
    if at_rest > 0:
        budget += at_rest
    with hogs:
        done = _collect(
            run, replicas=replicas, expected=jobs * ticks, budget=budget, finish_at=finish_at
        )
    grants = [m for m in run.group.history if m.event == "grant"]
    _write_trace(run, epoch)
    jobruns: dict[str, int] = {}
    if run.through == "runtime":
        jobruns = _runtime_ticks.count_jobruns(run.kubeconfig, run.namespace)
        return TickResults(
            grants=grants, done=done, epoch=epoch, jobruns=jobruns, ledger=_ledger_lines(ledger)
        )
    return TickResults(grants=grants, done=done, epoch=epoch)


@contextlib.contextmanager
def _cpu_hogs(count: int) -> Iterator[None]:
    """`count` processes that keep a CPU busy until the block ends."""
    burn = "while True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _ledger_lines(ledger: Any) -> tuple[int, int]:
    """(lines, distinct `job tick` pairs) of the benchmark jobs' runs in the ledger files."""
    lines, ticks = 0, set()
    for path in ledger.glob("*.log"):
        for line in path.read_text(encoding="utf-8").splitlines():
            job, tick = line.split(" ")[:2]
            if job.startswith("bench-"):
                lines += 1
                ticks.add((job, tick))
    return lines, len(ticks)


def _write_trace(run: BenchRun, epoch: float) -> None:
    """With $LEASECRON_BENCH_TRACE (a file path), what every replica through the runtime did,
    as JSON lines, times in seconds after tick 0: each request (replica, method, resource,
    sent, answered), each measured run start (`"start"`, replica, started, its claim's
    answer after its instant, token) and each garbage-collector pause over 20 ms (`"gc"`,
    replica, ended, seconds, generation)."""
    path = os.environ.get("LEASECRON_BENCH_TRACE")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as out:
        for m in (m for m in run.group.history if m.event == "grant"):
            answered, token = m.data.get("claim_answered"), m.data.get("token")
            out.write(json.dumps(["start", m.replica, m.data["t"] - epoch, answered, token]) + "\n")
        for m in (m for m in run.group.history if m.event == "trace"):
            for ended, seconds, generation in m.data.get("pauses", []):
                row = ["gc", m.replica, ended - epoch, seconds, generation]
                out.write(json.dumps(row) + "\n")
            for method, resource, sent, answered in m.data["requests"]:
                row = [m.replica, method, resource, sent - epoch, answered - epoch]
                out.write(json.dumps(row) + "\n")
    run.progress(f"request trace written to {path}")


def _collect(
    run: BenchRun, *, replicas: int, expected: int, budget: float, finish_at: float | None
) -> list[Message]:
    """Read until every replica is done (BenchError after `budget` seconds), printing the
    grants seen so far every few seconds; the done messages. With `finish_at` (wall time),
    every replica is told to finish once `expected` grants are seen or at `finish_at`."""
    deadline = time.monotonic() + budget
    done: dict[str, Message] = {}
    grants, reported = 0, time.monotonic()
    while len(done) < replicas:
        if time.monotonic() > deadline:
            raise BenchError(f"replicas not done after {budget:.0f}s ({grants} grants seen)")
        if finish_at is not None and (grants >= expected or time.time() >= finish_at):
            finish_at = None
            for replica in run.group.replicas.values():
                replica.send({"finish": True})
        message = run.group.poll(timeout=1.0)
        if message is not None and message.event == "grant":
            grants += 1
        elif message is not None and message.event == "done":
            done[message.replica] = message
        if time.monotonic() - reported >= 5.0:
            reported = time.monotonic()
            run.progress(f"{grants} of {expected} ticks granted; {len(done)} replicas done")
    return list(done.values())


def ticks_report(
    results: TickResults, *, replicas: int, jobs: int, ticks: int
) -> tuple[dict[str, Any], str]:
    """The JSON figures and the human table of a ticks run."""
    grants, done = results.grants, results.done
    account = account_ticks(
        ((int(m.data["job"]), int(m.data["tick"])) for m in grants), jobs=jobs, ticks=ticks
    )
    lags_ms = [float(m.data["lag"]) * 1000.0 for m in grants]
    woke_ms = [float(m.data.get("woke", math.nan)) * 1000.0 for m in grants]
    writes = sum(int(m.data["writes"]) for m in done)
    standby_seconds = sum(float(m.data["standby_seconds"]) for m in done)
    standby_requests = sum(int(m.data["standby_requests"]) for m in done)
    per_replica = {m.replica: sum(1 for g in grants if g.replica == m.replica) for m in done}
    figures: dict[str, Any] = {
        "bench": "ticks",
        "replicas": replicas,
        "jobs": jobs,
        "ticks": ticks,
        "runs": account.runs,
        "duplicates": account.duplicates,
        "missed": account.missed,
        "past_deadline": sum(1 for lag in lags_ms if lag > STARTING_DEADLINE_S * 1000.0),
        "start_lag_p50_ms": rounded(percentile(lags_ms, 0.5), 1),
        "start_lag_p99_ms": rounded(percentile(lags_ms, 0.99), 1),
        "start_lag_max_ms": rounded(max(lags_ms, default=math.nan), 1),
        "wake_lag_p50_ms": rounded(percentile(woke_ms, 0.5), 1),
        "wake_lag_p99_ms": rounded(percentile(woke_ms, 0.99), 1),
        "granted_at_rank": dict(
            sorted(Counter(str(m.data.get("rank", "?")) for m in grants).items())
        ),
        "writes": writes,
        "writes_per_run": rounded(writes / account.runs if account.runs else math.nan),
        "requests": sum(int(m.data["requests"]) for m in done),
        "reads_per_run": rounded(
            (sum(int(m.data["requests"]) for m in done) - writes) / account.runs
            if account.runs
            else math.nan
        ),
        "standby_requests": standby_requests,
        "standby_seconds": round(standby_seconds, 3),
        "standby_requests_per_s": rounded(
            standby_requests / standby_seconds if standby_seconds else math.nan
        ),
        "runs_per_replica": dict(sorted(per_replica.items())),
        **_resources(done, runs=account.runs, ticks=ticks),
        **_records(results, ticks=ticks),
        **_claim_split(grants),
        "skips": merge_counts(m.data.get("skips", {}) for m in done),
    }
    rows = [
        ("runs", f"{account.runs} of {account.expected}", "jobs x ticks"),
        ("duplicates", show(account.duplicates), "0"),
        ("missed", show(account.missed), "0"),
        ("started past startingDeadline", show(figures["past_deadline"]), "0"),
        ("start lag p50", show(figures["start_lag_p50_ms"], " ms"), "-"),
        ("start lag p99", show(figures["start_lag_p99_ms"], " ms"), _lag_target(jobs)),
        ("start lag max", show(figures["start_lag_max_ms"], " ms"), "-"),
    ]
    if "claim_sent_p99_ms" in figures:
        for key, label in _CLAIM_SPLIT:
            value = f"{show(figures[f'{key}_p50_ms'])} / {show(figures[f'{key}_p99_ms'], ' ms')}"
            rows += [(f"  {label} p50 / p99", value, "-")]
    if figures["wake_lag_p99_ms"] is not None:
        rows += [("  of which wake-up p99", show(figures["wake_lag_p99_ms"], " ms"), "-")]
    rows += [
        ("writes per run", show(figures["writes_per_run"]), "<= 5, independent of replicas"),
        ("reads per run (GET, LIST)", show(figures["reads_per_run"]), "-"),
        ("standby requests/s", show(figures["standby_requests_per_s"]), "0"),
    ]
    if "lease_writes_per_tick" in figures:
        rows += [
            ("Lease writes per tick", show(figures["lease_writes_per_tick"]), "O(shards)"),
            ("JobRun writes per run", show(figures["jobrun_writes_per_run"]), "-"),
            ("JobRuns found", _outcomes(figures["jobruns"]), f"{account.expected}"),
            (
                "last tick -> all JobRuns written",
                show(figures["jobruns_written_s"], " s"),
                "before the next minute",
            ),
            ("replica RSS max", show(figures["rss_mb_max"], " MB"), "<= 150 MB (1000 jobs)"),
            (
                "  of it before tick 0 (jobs synced)",
                show(figures.get("rss_before_tick_mb_max", math.nan), " MB"),
                "-",
            ),
            ("replica CPU s (mean)", show(figures["cpu_s_mean"], " s"), "-"),
            ("longest GC pause from tick 0", show(figures["gc_max_ms"], " ms"), "-"),
            ("GC time from tick 0 (max)", show(figures["gc_total_s_max"], " s"), "-"),
        ]
        rows += [
            (f"  {kind} per run", show(value), "-")
            for kind, value in figures["jobrun_writes_per_run_by_verb"].items()
        ]
    if results.ledger is not None:
        lines, distinct = results.ledger
        figures["ledger_lines"], figures["ledger_ticks"] = lines, distinct
        rows += [("ledger lines (distinct ticks)", f"{lines} ({distinct})", f"{account.expected}")]
    rest = _at_rest(done)
    if rest:
        figures["at_rest"] = rest
        per_minute = rest["per_replica_per_minute"]
        rows += [
            (f"at rest: {kind} /min/replica", show(value), "-")
            for kind, value in per_minute["requests"].items()
        ]
        rows += [
            (f"at rest: watch {kind} /min/replica", show(value), "-")
            for kind, value in per_minute["watch_events"].items()
        ]
    title = f"ticks: {replicas} replicas x {jobs} jobs x {ticks} ticks ({PERIOD_S:g}s apart)"
    return figures, table(rows, title=title)


_CLAIM_SPLIT = (
    ("claim_sent", "tick -> its claim write sent"),
    ("claim_write", "claim write answered in"),
    ("after_claim", "claim answered -> handler start"),
)


def _claim_split(grants: list[Message]) -> dict[str, Any]:
    """Through the runtime: a start's lag split at the write that claimed its instant (the
    last one this replica had answered before the start), for the grants that have one."""
    split: dict[str, list[float]] = {key: [] for key, _ in _CLAIM_SPLIT}
    for m in grants:
        sent, answered = m.data.get("claim_sent"), m.data.get("claim_answered")
        if sent is None or answered is None:
            continue
        split["claim_sent"].append(float(sent) * 1000.0)
        split["claim_write"].append((float(answered) - float(sent)) * 1000.0)
        split["after_claim"].append((float(m.data["lag"]) - float(answered)) * 1000.0)
    if not split["claim_sent"]:
        return {}
    figures: dict[str, Any] = {"claim_split_runs": len(split["claim_sent"])}
    for key, values in split.items():
        figures[f"{key}_p50_ms"] = rounded(percentile(values, 0.5), 1)
        figures[f"{key}_p99_ms"] = rounded(percentile(values, 0.99), 1)
    return figures


def _lag_target(jobs: int) -> str:
    if jobs == 1:
        return "p99 <= 20 ms"
    return "p99 <= 0.5 s (1000 jobs)" if jobs <= 1000 else "p99 <= 2 s (10,000 jobs)"


def _outcomes(jobruns: dict[str, int]) -> str:
    total = sum(jobruns.values())
    return f"{total} ({', '.join(f'{k} {v}' for k, v in jobruns.items())})" if total else "0"


def _records(results: TickResults, *, ticks: int) -> dict[str, Any]:
    """Through the runtime: JobRuns by outcome and the seconds from the last tick instant
    until the last replica's record backlog emptied."""
    if not results.done or "records_idle_at" not in results.done[0].data:
        return {}
    idle = [m.data["records_idle_at"] for m in results.done if m.data["records_idle_at"]]
    last_tick = results.epoch + (ticks - 1) * PERIOD_S
    return {
        "jobruns": results.jobruns,
        "jobruns_written_s": rounded(max(idle) - last_tick, 2) if idle else math.nan,
    }


def _resources(done: list[Message], *, runs: int, ticks: int) -> dict[str, Any]:
    """Writes by resource, RSS and CPU, when the replicas reported them (runtime driver)."""
    if not done or "writes_by" not in done[0].data:
        return {}
    by = merge_counts(m.data["writes_by"] for m in done)
    lease, jobruns = by.get("leases", 0.0), by.get("jobruns", 0.0)
    rss = [float(m.data["rss_mb"]) for m in done]
    cpu = [float(m.data["cpu_s"]) for m in done]
    kinds = merge_counts(m.data.get("writes_by_kind", {}) for m in done)
    return {
        "writes_by_resource": by,
        "writes_by_kind": kinds,
        "jobrun_writes_per_run_by_verb": {
            f"JobRun {kind.split(' ')[0]}": rounded(value / runs if runs else math.nan)
            for kind, value in kinds.items()
            if kind.endswith(" jobruns") or kind.endswith(" jobruns/status")
        },
        "lease_writes_per_tick": rounded(lease / ticks),
        "jobrun_writes_per_run": rounded(jobruns / runs if runs else math.nan),
        "rss_mb_max": rounded(max(rss), 1),
        "rss_before_tick_mb_max": rounded(
            max(float(m.data.get("rss_before_mb", math.nan)) for m in done), 1
        ),
        "gc_max_ms": max((float(m.data.get("gc_max_ms", 0.0)) for m in done), default=0.0),
        "gc_full_max_ms": max(
            (float(m.data.get("gc_full_max_ms", 0.0)) for m in done), default=0.0
        ),
        "gc_total_s_max": max((float(m.data.get("gc_total_s", 0.0)) for m in done), default=0.0),
        "cpu_s_mean": rounded(sum(cpu) / len(cpu), 2),
        "cpu_s_max": rounded(max(cpu), 2),
        "records_left": sum(float(m.data.get("record_backlog", 0)) for m in done),
    }


def _at_rest(done: list[Message]) -> dict[str, Any]:
    """The replicas' requests (by kind) and watch events in their at-rest window, summed and
    per replica per minute."""
    rests = [m.data["at_rest"] for m in done if m.data.get("at_rest")]
    if not rests:
        return {}
    minutes = sum(float(r["seconds"]) for r in rests) / 60.0
    requests = merge_counts(r["requests"] for r in rests)
    events = merge_counts(r["watch_events"] for r in rests)
    reopened = merge_counts(r["watches_opened"] for r in rests)
    return {
        "seconds": float(rests[0]["seconds"]),
        "requests": requests,
        "watch_events": events,
        "watches_opened": reopened,
        "cpu_s": rounded(sum(float(r["cpu_s"]) for r in rests), 2),
        "per_replica_per_minute": {
            "requests": {k: rounded(v / minutes) for k, v in requests.items()},
            "watch_events": {k: rounded(v / minutes) for k, v in {**events, **reopened}.items()},
        },
    }


def run_ticks(
    *,
    replicas: int,
    jobs: int,
    ticks: int,
    run_ms: float = 200.0,
    claim_step: float = 0.1,
    shards: int = DEFAULT_SHARDS,
    warm_up: bool = False,
    at_rest: float = 0.0,
    cpu_hogs: int = 0,
    through: str = "coordination",
    compare_cronjob: bool = False,
    cronjob_minutes: int = 1,
    json_output: bool = False,
    kubeconfig: str | None = None,
) -> dict[str, Any]:
    """Run the ticks benchmark, print its table (and JSON), and return the figures; with
    `compare_cronjob`, then the CronJob controller with `jobs` CronJobs on the same cluster
    (`_cronjob`), its figures under "cronjob"."""
    with cluster(kubeconfig) as config:
        with bench_run(prefix="ticks", through=through, kubeconfig=config) as run:
            results = measure_ticks(
                run,
                replicas=replicas,
                jobs=jobs,
                ticks=ticks,
                run_ms=run_ms,
                claim_step=claim_step,
                shards=shards,
                warm_up=warm_up,
                at_rest=at_rest,
                cpu_hogs=cpu_hogs,
            )
        figures, human = ticks_report(results, replicas=replicas, jobs=jobs, ticks=ticks)
        figures["run_ms"] = run_ms
        figures["through"] = through
        figures["cpu_hogs"] = cpu_hogs
        if through == "runtime":
            figures["shards"] = shards
            figures["warm_up"] = warm_up
        if compare_cronjob:
            print(human, flush=True)
            cronjob = run_cronjob(jobs=jobs, minutes=cronjob_minutes, kubeconfig=config)
            figures["cronjob"] = cronjob["runs"]
            human = ""  # printed before the CronJob tables
    print_result(figures, human, json_output=json_output)
    return figures
