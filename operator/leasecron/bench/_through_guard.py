"""The `guard` driver of a benchmark replica: a `Guard` of its own identity around a sync
body, called by a plain timer loop at every tick, as an application's own scheduler would.

`guards`: report "ready"; on the epoch command fire `--warm-up` ticks before the epoch (not
measured: the guard's Lease, caches and, with `--job`, its member Lease come into being),
then `--ticks` ticks `--period` seconds apart from the epoch. At each tick the loop wakes,
calls the guarded body (the guard computes the tick itself: the latest tick of `every`, or
of the job's schedule, at or before now), and the body reports a grant (tick index, token,
its own wall-clock start `t` and its lag after the tick) and sleeps `--run-ms`. "done" then
carries this replica's API requests and writes (by resource) from the epoch on, the skips by
reason, and the standby requests: requests this replica sent for the guard's Lease while it
saw a live grant of another replica on it, with the seconds such grants were seen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import urllib3

from leasecron.bench._drivers import ReplicaIO
from leasecron.bench._through_coordination import StandbyMeter
from leasecron.bench._through_runtime import BENCH_GROUP, requests_by_kind, writes_by_resource
from leasecron.coordination import lease_informer
from leasecron.coordination.resourcelocks import ROLE_SHARD
from leasecron.kube.clients import Kube
from leasecron.kube.transports import Request, Send
from leasecron.models.names import LABEL_ROLE
from leasecron.models.shards import own_lease_name
from leasecron.runtime import Guard, close_guards, current_run
from leasecron.runtime._guard_settings import LEASE_PREFIX

GUARD_NAME = "bench"
_SETTLE_S = 1.0


class LeaseRequests:
    """Requests a Kube sent for one Lease (a transport wrapper counting them)."""

    def __init__(self, kube: Kube, name: str) -> None:
        self.name = name
        self.requests = 0
        kube.wrap_transport(self._count)

    def _count(self, request: Request, send: Send) -> urllib3.BaseHTTPResponse:
        if request.resource.startswith("leases") and request.name == self.name:
            self.requests += 1
        return send()


def _fire(guarded: Any, *, io: ReplicaIO, epoch: float, args: argparse.Namespace) -> Counter[str]:
    """The timer loop (in its own thread): sleep to each tick, call the guarded body; the
    skips by reason."""
    skips: Counter[str] = Counter()
    for k in range(-args.warm_up, args.ticks):
        instant = epoch + k * args.period
        time.sleep(max(0.0, instant - time.time()))
        result = guarded(k >= 0)
        if not result and k >= 0:
            skips[result.reason] += 1
    return skips


async def guards(args: argparse.Namespace, io: ReplicaIO) -> None:
    kube = Kube.from_config(max_workers=8, request_timeout=10.0)
    watcher = Kube.from_config(max_workers=2, request_timeout=10.0)
    # A job= guard claims on its job's own shard Lease, a plain one on its own.
    lease = own_lease_name(BENCH_GROUP, args.job) if args.job else LEASE_PREFIX + GUARD_NAME
    counted = LeaseRequests(kube, lease)
    meter = StandbyMeter(args.identity, {lease: counted})
    informer = lease_informer(
        watcher, namespace=args.namespace, label_selector=f"{LABEL_ROLE}={ROLE_SHARD}"
    )
    informer.subscribe(meter.on_event)
    await informer.start()
    options: dict[str, Any] = {"job": args.job} if args.job else {"every": args.period}
    guard = Guard(
        GUARD_NAME,
        namespace=args.namespace,
        kube=kube,
        identity=args.identity,
        stagger=args.stagger,
        **options,
    )
    epoch = 0.0

    @guard
    def body(measured: bool) -> None:
        started = time.time()
        run = current_run()
        instant = run.tick.timestamp()
        if measured:
            io.emit(
                event="grant",
                job=0,
                tick=round((instant - epoch) / args.period),
                token=run.token,
                t=started,
                lag=started - instant,
            )
        time.sleep(args.run_ms / 1000.0)

    io.emit(event="ready", t=time.time())
    command = await io.next_command()
    if command is None:
        return
    epoch = float(command["epoch"])
    warm_up = asyncio.create_task(
        asyncio.to_thread(_fire, body, io=io, epoch=epoch, args=_only_warm_up(args))
    )
    await warm_up
    await asyncio.sleep(max(0.0, epoch - 0.05 - time.time()))
    writes, requests, by_kind = kube.write_count, kube.request_count, requests_by_kind()
    meter.finish(time.monotonic())
    meter.seconds, meter.requests = 0.0, 0
    skips = await asyncio.to_thread(_fire, body, io=io, epoch=epoch, args=_measured(args))
    await asyncio.sleep(args.run_ms / 1000.0 + _SETTLE_S)
    meter.finish(time.monotonic())
    after = requests_by_kind()
    io.emit(
        event="done",
        requests=kube.request_count - requests,
        writes=kube.write_count - writes,
        writes_by=writes_by_resource({k: v - by_kind.get(k, 0.0) for k, v in after.items()}),
        standby_requests=meter.requests,
        standby_seconds=meter.seconds,
        skips=dict(skips),
    )
    await io.stdin_closed.wait()
    await asyncio.to_thread(close_guards)
    with contextlib.suppress(Exception):
        await informer.stop()
    await kube.close()
    await watcher.close()


def _only_warm_up(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "ticks": 0})


def _measured(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "warm_up": 0})
