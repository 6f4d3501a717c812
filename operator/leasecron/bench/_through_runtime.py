"""The `runtime` driver of a benchmark replica: the in-pod Scheduler itself, as an application
runs it, with the benchmark's ScheduledJobs (created by the parent) and one async handler.

`ticks`: start a Scheduler of group `bench` (`--shards`: the shard count it proposes when the
group has no record yet) and report "ready"; on the epoch command wait until it runs all
`--jobs` (and `--warm-up-jobs`) jobs ("synced"), report every handler start of a benchmark job
as a grant (job, tick index, token, the handler's own wall-clock start `t`, its lag after the
tick, and when the write claiming its instant went out and was answered), and once the parent
says every run has started (`{"finish": true}`: it saw them all, or the last tick's
startingDeadline passed), the last runs are over and this process's run records are written,
report "done" with its API requests and writes (by resource and verb), when its record backlog
last emptied (`records_idle_at`: every JobRun of its runs written), peak RSS and CPU seconds.
With `--at-rest S`, the replica then counts its requests (by verb, resource and Lease role) and
the watch events it receives for S seconds with no tick due, and reports them too. Each run of
the handler appends a line to the replica's ledger file in `--ledger` (a little real work, as
an application's job does), and the start lag is taken inside the handler.

`requests`: the same Scheduler; report "ready", then "synced" once it runs the benchmark's
job, and a "start" (the run's tick, token, the handler's own wall-clock start `t`) at every
handler start, until stdin closes. The parent makes the run requests.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from leasecron._metrics import API_REQUESTS, RECORD_BACKLOG, SKIPS, WATCH_EVENTS
from leasecron.bench._drivers import ReplicaIO
from leasecron.kube._paths import describe
from leasecron.kube.clients import Kube
from leasecron.models.names import ANNOTATION_TICK, parse_tick
from leasecron.runtime import JobContext, Scheduler, Tuning

BENCH_GROUP = "bench"
HANDLER = "bench"
_SETTLE_S = 3.0
_RECORDS_WAIT_S = 120.0
_BACKLOG_POLL_S = 0.02
_TRACED_PAUSE_S = 0.02
"""Garbage-collector pauses longer than this go to the trace ($LEASECRON_BENCH_TRACE)."""
_QUIET_S = 1.0


def _backlog() -> float:
    """The record backlog gauge alone (collecting the whole registry costs a sample per job)."""
    return float(next(iter(RECORD_BACKLOG.collect())).samples[0].value)


class _BacklogWatch:
    """When this process's record backlog last went from pending to empty (wall time)."""

    def __init__(self) -> None:
        self.idle_at: float | None = None
        self.pending_seen = False

    async def run(self) -> None:
        pending = False
        while True:
            now = _backlog() > 0
            if pending and not now:
                self.idle_at = time.time()
            pending, self.pending_seen = now, self.pending_seen or now
            await asyncio.sleep(_BACKLOG_POLL_S)


class ClaimWrites:
    """Times of this process's claims of shard Lease instants (the first write carrying an
    instant and a token; the renewals after it are left out), wrapped around its Kube: when
    the claim of a run's instant went out and how long the API server took to answer it, to
    tell a start's lag apart."""

    def __init__(self, kube: Kube) -> None:
        self._request = kube.request
        self.by_claim: dict[tuple[float, int], tuple[float, float]] = {}
        self.last_record_write: float | None = None
        """Wall time the last JobRun write of this process was answered."""
        self.trace: list[tuple[str, str, float, float]] | None = (
            [] if os.environ.get("LEASECRON_BENCH_TRACE") else None
        )
        self.counted: Counter[str] | None = None
        """While not None (the at-rest window), requests sent by `request_kind`."""
        setattr(kube, "request", self._timed)  # noqa: B010  # mypy refuses assigning a method

    async def _timed(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        sent = time.time()
        if self.counted is not None:
            self.counted[request_kind(method, path, kwargs.get("query"))] += 1
        try:
            answer = await self._request(method, path, **kwargs)
        finally:
            if self.trace is not None:
                self.trace.append((method, path.rsplit("/", 2)[-2:][-1], sent, time.time()))
        if method in ("POST", "PUT", "PATCH") and "/jobruns" in path:
            self.last_record_write = time.time()
        if (
            method in ("PUT", "POST")
            and "/leases" in path
            and "leasecron-shard-" in path + str(kwargs.get("body", ""))
        ):
            tick = _tick_of(answer)
            token = (answer.get("spec") or {}).get("leaseTransitions")
            if tick is not None and isinstance(token, int):
                self.by_claim.setdefault((tick, token), (sent, time.time()))
        return answer

    def claim_of(self, instant: float, token: int | None) -> tuple[float, float] | None:
        """(sent, answered) of the write that claimed `instant` with `token`."""
        return None if token is None else self.by_claim.get((instant, token))


def request_kind(method: str, path: str, query: Any = None) -> str:
    """`<verb> <resource>` of a request, with the role of a named Lease (`update leases/member`:
    the word after `leasecron-` in its name)."""
    verb, resource = describe(method, path, query)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if resource == "leases" and name.startswith("leasecron-"):
        resource = f"leases/{name.split('-')[1]}"
    return f"{verb} {resource}"


def _tick_of(lease: dict[str, Any]) -> float | None:
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TICK)
    try:
        return parse_tick(text).timestamp() if isinstance(text, str) else None
    except ValueError:
        return None


def requests_by_kind(*, writes_only: bool = True) -> dict[str, float]:
    """API requests of this process by `<verb> <resource>` (writes alone by default: create,
    update, patch, delete)."""
    counts: dict[str, float] = {}
    # The metric alone: collecting the whole registry costs samples per job, and this is
    # read at the tick instant.
    for metric in API_REQUESTS.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            verb = sample.labels["verb"]
            if not writes_only or verb in ("create", "update", "patch", "delete"):
                key = f"{verb} {sample.labels['resource']}"
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def writes_by_resource(by_kind: dict[str, float]) -> dict[str, float]:
    """`requests_by_kind` summed by resource."""
    writes: dict[str, float] = {}
    for key, value in by_kind.items():
        resource = key.split(" ", 1)[1]
        writes[resource] = writes.get(resource, 0.0) + value
    return writes


def watch_events() -> dict[str, float]:
    """Watch events this process received, by `<type> <resource>`."""
    events: dict[str, float] = {}
    for metric in WATCH_EVENTS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                key = f"{sample.labels['type']} {sample.labels['resource']}"
                events[key] = events.get(key, 0.0) + sample.value
    return events


def _minus(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in sorted(after.items()) if v - before.get(k, 0.0)}


async def _until(condition: Callable[[], bool], *, timeout: float | None) -> None:  # noqa: ASYNC109
    """Poll `condition` (a value of the Scheduler or of the metrics: no event to wait on)
    every 0.1 s until it holds or `timeout` seconds pass."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not condition() and (deadline is None or time.monotonic() < deadline):  # noqa: ASYNC110
        await asyncio.sleep(0.1)


async def _until_written(kube: Kube) -> None:
    """Until the record backlog is empty and no write went out for `_QUIET_S` (the final
    status of a run recorded on its start path is written after its handler, not queued), at
    most `_RECORDS_WAIT_S` seconds."""
    deadline = time.monotonic() + _RECORDS_WAIT_S
    writes, quiet_since = kube.write_count, time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        if kube.write_count != writes or _backlog() > 0:
            writes, quiet_since = kube.write_count, time.monotonic()
        elif time.monotonic() - quiet_since >= _QUIET_S:
            return


class GcPauses:
    """The garbage collector's pauses in this process (all generations): count, total and
    longest, in seconds; `since(t)` the longest that ended after wall time t."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []  # (ended, seconds, generation)
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(
                (time.time(), time.perf_counter() - self._started, info["generation"])
            )

    def figures(self, since: float) -> dict[str, float]:
        after = [(s, g) for ended, s, g in self.pauses if ended >= since]
        full = [s for s, g in after if g == 2]
        return {
            "gc_total_s": round(sum(s for s, _ in after), 3),
            "gc_max_ms": round(1000 * max((s for s, _ in after), default=0.0), 1),
            "gc_full": len(full),
            "gc_full_max_ms": round(1000 * max(full, default=0.0), 1),
        }


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def ticks(args: argparse.Namespace, io: ReplicaIO) -> None:
    kube = Kube.from_config(max_workers=32, request_timeout=10.0)
    scheduler = Scheduler(
        BENCH_GROUP,
        namespace=args.namespace,
        kube=kube,
        identity=args.identity,
        grace_period=5.0,
        # $LEASECRON_BENCH_TUNE_GC=0: the garbage collector as CPython sets it (for a before).
        tuning=Tuning(
            claim_step=args.claim_step, tune_gc=os.environ.get("LEASECRON_BENCH_TUNE_GC") != "0"
        ),
        shards=args.shards,
    )
    epoch: float | None = None
    claims = ClaimWrites(kube)
    pauses = GcPauses()
    ledger = _ledger(args)

    @scheduler.job(HANDLER)
    async def bench(ctx: JobContext) -> None:
        started = time.time()
        instant = ctx.tick.timestamp()
        ledger.write(f"{ctx.job} {ctx.tick.isoformat()} {ctx.token} {args.identity}\n")
        if epoch is not None and ctx.job.startswith("bench-"):  # not a warm-up job
            claim = claims.claim_of(instant, ctx.token)
            io.emit_soon(
                event="grant",
                job=int(ctx.job.rsplit("-", 1)[1]),
                tick=round((instant - epoch) / args.period),
                token=ctx.token,
                t=started,
                lag=started - instant,
                claim_sent=None if claim is None else claim[0] - instant,
                claim_answered=None if claim is None else claim[1] - instant,
            )
        await asyncio.sleep(args.run_ms / 1000.0)

    async with scheduler:
        io.emit(event="ready", t=time.time())
        command = await io.next_command()
        if command is None:
            return
        expected = args.jobs + args.warm_up_jobs
        await _until(lambda: len(scheduler.jobs) >= expected, timeout=None)
        epoch = float(command["epoch"])
        io.emit(event="synced", t=time.time())
        await _measure(args, io, kube, epoch, claims, pauses)
    ledger.close()
    await kube.close()


def _ledger(args: argparse.Namespace) -> Any:
    """The file each run appends a line to (`--ledger` directory; the null device without)."""
    if not args.ledger:
        return open(os.devnull, "w", encoding="utf-8")  # closed after the run
    path = os.path.join(args.ledger, f"{args.identity}.log")
    return open(path, "a", encoding="utf-8", buffering=1)  # line-buffered


async def requests(args: argparse.Namespace, io: ReplicaIO) -> None:
    kube = Kube.from_config(max_workers=8, request_timeout=10.0)
    scheduler = Scheduler(
        BENCH_GROUP, namespace=args.namespace, kube=kube, identity=args.identity, grace_period=5.0
    )

    @scheduler.job(HANDLER)
    async def bench(ctx: JobContext) -> None:
        started = time.time()
        io.emit_soon(event="start", tick=ctx.tick.timestamp(), token=ctx.token, t=started)
        await asyncio.sleep(args.run_ms / 1000.0)

    async with scheduler:
        io.emit(event="ready", t=time.time())
        await _until(lambda: len(scheduler.jobs) >= args.jobs, timeout=None)
        io.emit(event="synced", t=time.time())
        await io.stdin_closed.wait()
    await kube.close()


async def _measure(
    args: argparse.Namespace,
    io: ReplicaIO,
    kube: Kube,
    epoch: float,
    claims: ClaimWrites,
    pauses: GcPauses,
) -> None:
    await asyncio.sleep(max(0.0, epoch - time.time()))
    rss_before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    writes, requests, cpu = kube.write_count, kube.request_count, _cpu_seconds()
    by_kind = requests_by_kind()
    watch = _BacklogWatch()
    watcher = asyncio.create_task(watch.run())
    # The parent says when every run of the ticks has started (or could no longer start);
    # then the last runs end and their records are written.
    await io.next_command()
    await asyncio.sleep(args.run_ms / 1000.0 + _SETTLE_S)
    await _until_written(kube)
    watcher.cancel()
    written = _minus(requests_by_kind(), by_kind)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    cpu_s = _cpu_seconds() - cpu
    at_rest = await _at_rest(args.at_rest, claims) if args.at_rest > 0 else None
    if claims.trace is not None:  # $LEASECRON_BENCH_TRACE: every request, for a closer look
        long_pauses = [pause for pause in pauses.pauses if pause[1] > _TRACED_PAUSE_S]
        io.emit(event="trace", requests=claims.trace, pauses=long_pauses)
    io.emit(
        event="done",
        records_idle_at=claims.last_record_write or (watch.idle_at if watch.pending_seen else None),
        requests=kube.request_count - requests,
        writes=kube.write_count - writes,
        writes_by=writes_by_resource(written),
        writes_by_kind=written,
        record_backlog=_backlog(),
        rss_mb=rss_mb,
        rss_before_mb=rss_before_mb,
        cpu_s=cpu_s,
        at_rest=at_rest,
        **pauses.figures(since=epoch - 1.0),
        standby_requests=0,
        standby_seconds=0.0,
        skips=_skips(),
    )


async def _at_rest(seconds: float, claims: ClaimWrites) -> dict[str, Any]:
    """What this replica sends and receives for `seconds` with no tick due: its requests by
    kind (a named Lease by role) and the watch events it receives (and the watches it opens
    again), after its runs are over and their records written."""
    events, watches = watch_events(), _watches()
    claims.counted = Counter()
    cpu = _cpu_seconds()
    await asyncio.sleep(seconds)
    sent, claims.counted = dict(claims.counted), None
    return {
        "seconds": seconds,
        "requests": dict(sorted(sent.items())),
        "watches_opened": _minus(_watches(), watches),
        "watch_events": _minus(watch_events(), events),
        "cpu_s": _cpu_seconds() - cpu,
    }


def _watches() -> dict[str, float]:
    return {k: v for k, v in requests_by_kind(writes_only=False).items() if k.startswith("watch")}


def _skips() -> dict[str, Any]:
    totals: dict[str, float] = {}
    for metric in SKIPS.collect():
        for sample in metric.samples:
            if sample.name == "leasecron_skips_total":
                reason = sample.labels["reason"]
                totals[reason] = totals.get(reason, 0.0) + sample.value
    return totals
