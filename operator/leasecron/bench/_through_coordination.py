"""The `coordination` driver of a benchmark replica: Elector and TickLock used directly, as
the runtime uses them, with one shared watch-fed Lease cache per process.

`elect`: contend for the leader Lease `leasecron-leader-bench`; report each term's start and
end; on SIGTERM (or stdin closing) stop with release, as a pod being terminated does.
`ticks`: for tick k at `epoch + k * period` claim every job's tick after the rendezvous
stagger (rank x claim step, like the runtime), "run" for `run_ms` and release. Requests are
counted per job Lease, and those sent while this replica sees a live grant by another replica
on that Lease are reported as standby requests, with the seconds such grants were seen live.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from leasecron._metrics import SKIPS
from leasecron.bench._drivers import ReplicaIO, bench_job
from leasecron.coordination import Elector, Term, TickLock, lease_informer
from leasecron.kube.clients import Kube
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer, WatchEvent
from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.models.decisions import rendezvous_rank
from leasecron.models.names import format_tick, job_lease_name, leader_lease_name

BENCH_GROUP = "bench"


async def _connect(namespace: str, *, max_workers: int) -> tuple[Kube, Informer]:
    kube = Kube.from_config(max_workers=max_workers, request_timeout=10.0)
    informer = lease_informer(kube, namespace=namespace)
    await informer.start()
    return kube, informer


def election_config(lease_duration: float) -> ElectionConfig:
    """leaseDuration with renewDeadline and retryPeriod in client-go's default proportions
    (15 s / 10 s / 2 s is 1 : 0.67 : 0.13; here 1 : 0.75 : 0.25 for short leases), keeping
    renewDeadline at least 1 s below leaseDuration (the margin ElectionConfig requires)."""
    return ElectionConfig(
        lease_duration=lease_duration,
        renew_deadline=min(lease_duration * 0.75, lease_duration - 1.0),
        retry_period=lease_duration * 0.25,
    )


async def elect(args: argparse.Namespace, io: ReplicaIO) -> None:
    kube, informer = await _connect(args.namespace, max_workers=4)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    def started(term: Term) -> None:
        io.emit(event="started", token=term.token, t=time.time())

    def stopped(term: Term) -> None:
        io.emit(event="stopped", token=term.token, t=time.time())

    elector = Elector(
        kube,
        informer,
        namespace=args.namespace,
        name=leader_lease_name(BENCH_GROUP),
        config=election_config(args.lease_duration),
        identity=args.identity,
        on_started_leading=started,
        on_stopped_leading=stopped,
    )
    elector.start()
    io.emit(event="ready", t=time.time())
    closed = asyncio.create_task(io.stdin_closed.wait())
    await asyncio.wait([asyncio.create_task(stop.wait()), closed], return_when="FIRST_COMPLETED")
    await elector.stop(release=True)
    io.emit(event="exit", t=time.time(), requests=kube.request_count, writes=kube.write_count)
    await informer.stop()
    await kube.close()


class CountingStore:
    """A LeaseStore for one Lease's lock that counts the requests sent through it."""

    def __init__(self, store: LeaseStore) -> None:
        self._store = store
        self.requests = 0

    async def get(
        self,
        *,
        namespace: str,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any] | None:
        self.requests += 1
        return await self._store.get(namespace=namespace, name=name, timeout=timeout)

    async def create(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        self.requests += 1
        return await self._store.create(namespace=namespace, body=body, timeout=timeout)

    async def replace(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        self.requests += 1
        return await self._store.replace(namespace=namespace, body=body, timeout=timeout)

    async def delete(self, *, namespace: str, name: str) -> None:
        self.requests += 1
        await self._store.delete(namespace=namespace, name=name)


class Counted(Protocol):
    """What counts the requests sent for one Lease (a `CountingStore`, or a transport
    wrapper)."""

    @property
    def requests(self) -> int: ...


class StandbyMeter:
    """Per Lease: the seconds this replica saw a live grant by someone else, and the requests
    it sent for that Lease meanwhile. Fed by the informer's events."""

    def __init__(self, identity: str, stores: Mapping[str, Counted]) -> None:
        self.identity = identity
        self.stores = stores
        self.seconds = 0.0
        self.requests = 0
        self._open: dict[str, tuple[float, int]] = {}

    def on_event(self, event: WatchEvent) -> None:
        name = str(event.obj.get("metadata", {}).get("name", ""))
        store = self.stores.get(name)
        if store is None:
            return
        spec = event.obj.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        live = event.type != "DELETED" and holder not in ("", self.identity)
        if live and name not in self._open:
            self._open[name] = (event.observed_at, store.requests)
        elif not live and name in self._open:
            self._close(name, event.observed_at)

    def _close(self, name: str, now: float) -> None:
        since, requests = self._open.pop(name)
        self.seconds += now - since
        self.requests += self.stores[name].requests - requests

    def finish(self, now: float) -> None:
        for name in list(self._open):
            self._close(name, now)


def _skips() -> dict[str, float]:
    """This process's skipped claims by reason, over all jobs."""
    totals: dict[str, float] = {}
    for metric in SKIPS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                reason = sample.labels["reason"]
                totals[reason] = totals.get(reason, 0.0) + sample.value
    return totals


async def ticks(args: argparse.Namespace, io: ReplicaIO) -> None:
    kube, informer = await _connect(args.namespace, max_workers=32)
    members = [m for m in args.members.split(",") if m] or [args.identity]
    names = [bench_job(j) for j in range(args.jobs)]
    stores = {job_lease_name(name): CountingStore(LeaseStore(kube)) for name in names}
    locks = [
        TickLock(
            stores[job_lease_name(name)],
            informer,
            namespace=args.namespace,
            name=job_lease_name(name),
            job=name,
            config=LockConfig(at_most_for=max(5.0, args.period * 5)),
            identity=args.identity,
        )
        for name in names
    ]
    meter = StandbyMeter(args.identity, stores)
    informer.subscribe(meter.on_event)
    io.emit(event="ready", t=time.time())
    command = await io.next_command()
    if command is None:
        return
    epoch = float(command["epoch"])
    writes, requests = kube.write_count, kube.request_count
    tasks: list[asyncio.Task[None]] = []
    latest: dict[int, asyncio.Task[None]] = {}
    for k in range(args.ticks):
        instant = epoch + k * args.period
        await asyncio.sleep(max(0.0, instant - time.time()))
        tick = datetime.fromtimestamp(instant, UTC)
        for j, lock in enumerate(locks):
            run = _claim_and_run(
                lock, io, args, members, job=j, k=k, tick=tick, instant=instant, after=latest.get(j)
            )
            latest[j] = task = asyncio.create_task(run)
            tasks.append(task)
    await asyncio.gather(*tasks)
    meter.finish(time.monotonic())
    io.emit(
        event="done",
        requests=kube.request_count - requests,
        writes=kube.write_count - writes,
        standby_requests=meter.requests,
        standby_seconds=meter.seconds,
        skips=_skips(),
    )
    for lock in locks:
        await lock.close()
    with contextlib.suppress(Exception):
        await informer.stop()
    await kube.close()


async def _claim_and_run(
    lock: TickLock,
    io: ReplicaIO,
    args: argparse.Namespace,
    members: list[str],
    *,
    job: int,
    k: int,
    tick: datetime,
    instant: float,
    after: asyncio.Task[None] | None,
) -> None:
    """Claim `tick` of one job once this replica is done with the job's previous tick (a job
    never overlaps itself), run, release, and report the grant."""
    if after is not None:
        await after
    woke = time.time()
    rank = rendezvous_rank(f"{lock.job}/{format_tick(tick)}", args.identity, members)
    grant = await lock.claim(
        tick, stagger=rank * args.claim_step, starting_deadline=args.starting_deadline
    )
    if grant is None:
        return
    started = time.time()
    io.emit(
        event="grant",
        job=job,
        tick=k,
        token=grant.token,
        t=started,
        lag=started - instant,
        woke=woke - instant,
        rank=rank,
    )
    await asyncio.sleep(args.run_ms / 1000.0)
    await grant.release()
