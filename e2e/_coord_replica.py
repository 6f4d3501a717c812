"""One replica process for e2e/test_coordination_processes.py: JSON lines on stdout.

    python e2e/_coord_replica.py ticks --namespace NS --index I --replicas N --count C
        --period P [--skew S]      # reads the shared epoch (time.time()) from stdin
    python e2e/_coord_replica.py elect --namespace NS --identity ID
    python e2e/_coord_replica.py hold --namespace NS --identity ID

`ticks`: tick k of C is due at epoch + k*P by this replica's (possibly skewed) wall clock;
it is the virtual instant `base + k seconds` (whole seconds, as the tick annotation stores
them). A replica woken late tries each tick it overslept, in order. The
rendezvous-preferred replica claims at once, the others after a stagger; the
holder releases straight away. Prints {"grant": k, "token": t} per grant or {"skip": k,
"reason": r} (the skip's reason) per tick it did not get, then a summary.
`elect`: runs an Elector; prints started/stopped events with wall times; SIGTERM stops it
with release. `hold`: claims the current second's tick (retrying every 0.1 s), keeps the
grant alive and reports when it is lost. Uses $KUBECONFIG.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from leasecron._logs import configure
from leasecron._metrics import SKIPS
from leasecron.coordination import (
    Elector,
    Grant,
    LostLockError,
    Skipped,
    Term,
    TickLock,
    lease_informer,
)
from leasecron.kube.clients import Kube
from leasecron.kube.watches import Informer
from leasecron.models.clocks import SystemClock
from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.models.decisions import rendezvous_rank
from leasecron.testing.faults import install_from_env

FAST = ElectionConfig(lease_duration=2, renew_deadline=1, retry_period=0.5)


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def connect(namespace: str) -> tuple[Kube, Informer]:
    kube = Kube.from_config(max_workers=8, request_timeout=5.0)
    install_from_env(kube)  # $LEASECRON_FAULTS, when a test sets it
    informer = lease_informer(kube, namespace=namespace)
    await informer.start()
    return kube, informer


async def claim_patiently(
    lock: TickLock, tick: datetime, stagger: float, patience: float
) -> Grant | Skipped:
    """Claim; when skipped because the previous tick's grant still looked live, wait (up to
    `patience`) for the Lease to change and try once more: with short ticks the release of
    the previous run may still be on its way through the watch."""
    result = await lock.try_claim(tick, stagger=stagger)
    seen = lock.lease.observe()
    if isinstance(result, Grant) or seen is None or seen.observation.record.free:
        return result
    record = seen.observation.record
    if record.tick is not None and record.tick >= tick:
        return result
    version = seen.resource_version

    def changed() -> bool:
        now = lock.lease.observe()
        return now is not None and now.resource_version != version

    if await lock.lease.view.wait_for(lock.namespace, lock.name, changed, timeout=patience):
        return await lock.try_claim(tick, stagger=stagger)
    return result


async def ticks(args: argparse.Namespace) -> None:
    kube, informer = await connect(args.namespace)
    clock = SystemClock(skew=timedelta(seconds=args.skew))
    members = [f"replica-{i}" for i in range(args.replicas)]
    me = members[args.index]
    lock = TickLock(
        kube,
        informer,
        namespace=args.namespace,
        name="leasecron-job-fast",
        job="fast",
        config=LockConfig(at_most_for=2),
        identity=me,
        clock=clock,
    )
    emit(ready=me)
    epoch = float(await asyncio.to_thread(sys.stdin.readline))
    base = datetime.fromtimestamp(math.floor(epoch), UTC)
    last = -1
    while last < args.count - 1:
        due = min(args.count - 1, math.floor((clock.now().timestamp() - epoch) / args.period))
        for k in range(last + 1, due + 1):  # a replica woken late still tries every tick
            last = k
            stagger = rendezvous_rank(f"fast/{k}", me, members) * args.period / 5
            result = await claim_patiently(lock, base + timedelta(seconds=k), stagger, args.period)
            if isinstance(result, Grant):
                emit(grant=k, token=result.token)
                await result.release()
            else:
                emit(skip=k, reason=result.reason)
        wake = epoch + (last + 1) * args.period
        await asyncio.sleep(max(0.0, wake - clock.now().timestamp()))
    skips = {
        sample.labels["reason"]: sample.value
        for metric in SKIPS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    emit(done=me, requests=kube.request_count, writes=kube.write_count, skips=skips)
    await informer.stop()


async def elect(args: argparse.Namespace) -> None:
    kube, informer = await connect(args.namespace)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    def started(term: Term) -> None:
        emit(event="started", token=term.token, t=time.time())

    def stopped(term: Term) -> None:
        emit(event="stopped", token=term.token, t=time.time())

    elector = Elector(
        kube,
        informer,
        namespace=args.namespace,
        name="leasecron-leader-e2e",
        config=FAST,
        identity=args.identity,
        on_started_leading=started,
        on_stopped_leading=stopped,
    )
    elector.start()
    emit(ready=args.identity)
    await stop.wait()
    await elector.stop(release=True)
    emit(event="exit", t=time.time())
    await informer.stop()


async def hold(args: argparse.Namespace) -> None:
    kube, informer = await connect(args.namespace)
    lock = TickLock(
        kube,
        informer,
        namespace=args.namespace,
        name="leasecron-job-hold",
        config=LockConfig(at_most_for=2),
        identity=args.identity,
    )
    emit(ready=args.identity)
    grant = None
    while grant is None:
        tick = datetime.now(UTC).replace(microsecond=0)
        grant = await lock.claim(tick)
        if grant is None:
            await asyncio.sleep(0.1)
    emit(event="claimed", token=grant.token, t=time.time())
    async with grant.keep_alive() as keep_alive:
        await grant.lost.wait_async()
        try:
            grant.assert_held()
            held = "held"
        except LostLockError as e:
            held = f"LostLockError: {e}"
        emit(event="lost", reason=grant.lost_reason, assert_held=held, renewals=keep_alive.renewals)
    await asyncio.Event().wait()  # stay up until the test ends this process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ticks", "elect", "hold"])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--identity", default="replica")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--period", type=float, default=0.05)
    parser.add_argument("--skew", type=float, default=0.0)
    args = parser.parse_args()
    configure(level="info")  # structured logs to stderr; stdout carries the JSON events
    asyncio.run({"ticks": ticks, "elect": elect, "hold": hold}[args.mode](args))


if __name__ == "__main__":
    main()
