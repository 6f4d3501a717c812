"""The `runtime` driver of a benchmark replica: the in-pod Scheduler itself, as an application
runs it, with the benchmark's ScheduledJobs (created by the parent) and one async handler.

`ticks`: start a Scheduler of group `bench` (`--shards`: the shard count it proposes when the
group has no record yet) and report "ready"; on the epoch command wait until it runs all
`--jobs` (and `--warm-up-jobs`) jobs ("synced"), report every handler start of a benchmark job
as a grant (job, tick index, token, the handler's own wall-clock start `t`, its lag after the
tick, and when the write claiming its instant went out and was answered), and once the parent
says every run has started (`{"finish": true}`: it saw them all, or the last tick's
startingDeadline passed), the last runs are over and this process's run records are written,
report "done" with its API requests and writes (by resource), when its record backlog last
emptied (`records_idle_at`: every JobRun of its runs written), peak RSS and CPU seconds.

`requests`: the same Scheduler; report "ready", then "synced" once it runs the benchmark's
job, and a "start" (the run's tick, token, the handler's own wall-clock start `t`) at every
handler start, until stdin closes. The parent makes the run requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from collections.abc import Callable
from typing import Any

from leasecron._metrics import API_REQUESTS, RECORD_BACKLOG, SKIPS
from leasecron.bench._drivers import ReplicaIO
from leasecron.kube.clients import Kube
from leasecron.models.names import ANNOTATION_TICK, parse_tick
from leasecron.runtime import JobContext, Scheduler, Tuning

BENCH_GROUP = "bench"
HANDLER = "bench"
_SETTLE_S = 3.0
_RECORDS_WAIT_S = 120.0
_BACKLOG_POLL_S = 0.02
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
        setattr(kube, "request", self._timed)  # noqa: B010  # mypy refuses assigning a method

    async def _timed(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        sent = time.time()
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


def _tick_of(lease: dict[str, Any]) -> float | None:
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TICK)
    try:
        return parse_tick(text).timestamp() if isinstance(text, str) else None
    except ValueError:
        return None


def writes_by_resource() -> dict[str, float]:
    """API writes of this process by resource (create, update, patch, delete)."""
    writes: dict[str, float] = {}
    # The metric alone: collecting the whole registry costs samples per job, and this is
    # read at the tick instant.
    for metric in API_REQUESTS.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            if sample.labels["verb"] in ("create", "update", "patch", "delete"):
                key = sample.labels["resource"]
                writes[key] = writes.get(key, 0.0) + sample.value
    return writes


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
        tuning=Tuning(claim_step=args.claim_step),
        shards=args.shards,
    )
    epoch: float | None = None
    claims = ClaimWrites(kube)

    @scheduler.job(HANDLER)
    async def bench(ctx: JobContext) -> None:
        started = time.time()
        instant = ctx.tick.timestamp()
        if epoch is not None and ctx.job.startswith("bench-"):  # not a warm-up job
            claim = claims.claim_of(instant, ctx.token)
            io.emit(
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
        await _measure(args, io, kube, epoch, claims)
    await kube.close()


async def requests(args: argparse.Namespace, io: ReplicaIO) -> None:
    kube = Kube.from_config(max_workers=8, request_timeout=10.0)
    scheduler = Scheduler(
        BENCH_GROUP, namespace=args.namespace, kube=kube, identity=args.identity, grace_period=5.0
    )

    @scheduler.job(HANDLER)
    async def bench(ctx: JobContext) -> None:
        started = time.time()
        io.emit(event="start", tick=ctx.tick.timestamp(), token=ctx.token, t=started)
        await asyncio.sleep(args.run_ms / 1000.0)

    async with scheduler:
        io.emit(event="ready", t=time.time())
        await _until(lambda: len(scheduler.jobs) >= args.jobs, timeout=None)
        io.emit(event="synced", t=time.time())
        await io.stdin_closed.wait()
    await kube.close()


async def _measure(
    args: argparse.Namespace, io: ReplicaIO, kube: Kube, epoch: float, claims: ClaimWrites
) -> None:
    await asyncio.sleep(max(0.0, epoch - time.time()))
    writes, requests, cpu = kube.write_count, kube.request_count, _cpu_seconds()
    by_resource = writes_by_resource()
    watch = _BacklogWatch()
    watcher = asyncio.create_task(watch.run())
    # The parent says when every run of the ticks has started (or could no longer start);
    # then the last runs end and their records are written.
    await io.next_command()
    await asyncio.sleep(args.run_ms / 1000.0 + _SETTLE_S)
    await _until_written(kube)
    watcher.cancel()
    after = writes_by_resource()
    if claims.trace is not None:  # $LEASECRON_BENCH_TRACE: every request, for a closer look
        io.emit(event="trace", requests=claims.trace)
    io.emit(
        event="done",
        records_idle_at=claims.last_record_write or (watch.idle_at if watch.pending_seen else None),
        requests=kube.request_count - requests,
        writes=kube.write_count - writes,
        writes_by={k: v - by_resource.get(k, 0.0) for k, v in after.items()},
        record_backlog=_backlog(),
        rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        cpu_s=_cpu_seconds() - cpu,
        standby_requests=0,
        standby_seconds=0.0,
        skips=_skips(),
    )


def _skips() -> dict[str, Any]:
    totals: dict[str, float] = {}
    for metric in SKIPS.collect():
        for sample in metric.samples:
            if sample.name == "leasecron_skips_total":
                reason = sample.labels["reason"]
                totals[reason] = totals.get(reason, 0.0) + sample.value
    return totals
