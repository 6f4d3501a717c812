"""One replica of an application using leasecron's Scheduler, for the runtime's e2e tests.

    KUBECONFIG=... POD_NAME=replica-0 python e2e/_runtime_replica.py --namespace NS \
        [--shards 16 --shard-lease 10]

Registers five handlers and prints one JSON line per event on stdout (logs go to stderr):

- `tick` (sync) and `everywhere` (sync): {"event": "run", "job", "tick", "token", "t"}
- `slow` (sync): the same event, then half a second of work (ended early when the grant is
  lost)
- `owner` (async, single-owner): {"event": "owner-start", "token", "t"} when its term starts,
  then loops until cancelled; {"event": "owner-stop", "token", "t"} when it ends
- `ready` once the scheduler runs, `stopped` after SIGTERM and a graceful stop, with the
  number of API requests and writes this process sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from typing import Any

from prometheus_client import REGISTRY

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.runtime import Tuning
from leasecron.testing.faults import install_from_env

_print_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.time(), **fields})
    with _print_lock:
        print(line, flush=True)


def ran(ctx: JobContext) -> None:
    emit("run", job=ctx.job, tick=ctx.tick.isoformat(), token=ctx.token, holder=ctx.holder)


def slow(ctx: JobContext) -> None:
    """A run that lasts half a second, so that a replica is often caught mid-run."""
    ran(ctx)
    ctx.lost.wait(0.5)


async def owner(ctx: JobContext) -> None:
    emit("owner-start", job=ctx.job, token=ctx.token, holder=ctx.holder)
    try:
        await asyncio.Event().wait()  # a long-lived loop, until cancelled
    finally:
        emit("owner-stop", job=ctx.job, token=ctx.token, holder=ctx.holder)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--group", default="default")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--shard-lease", type=int, default=10, help="seconds")
    args = parser.parse_args()
    kube = Kube.from_config()
    install_from_env(kube)  # $LEASECRON_FAULTS, when a test sets it
    scheduler = Scheduler(
        args.group,
        namespace=args.namespace,
        kube=kube,
        grace_period=args.grace,
        tuning=Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=args.shard_lease),
        shards=args.shards,
    )
    scheduler.register("tick", ran)
    scheduler.register("everywhere", ran)
    scheduler.register("slow", slow)
    scheduler.register("owner", owner)

    def announce() -> None:
        if scheduler.wait_ready(60):
            emit("ready", identity=scheduler.identity)

    threading.Thread(target=announce, daemon=True).start()
    scheduler.run_forever()
    emit("stopped", requests=kube.request_count, writes=kube.write_count, **_counters())
    return 0


def _counters() -> dict[str, dict[str, float]]:
    """Skips by reason and API writes by verb and resource, from this process's metrics."""
    skips: dict[str, float] = {}
    writes: dict[str, float] = {}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "leasecron_skips_total":
                reason = sample.labels["reason"]
                skips[reason] = skips.get(reason, 0) + sample.value
            elif sample.name == "leasecron_api_requests_total":
                verb, resource = sample.labels["verb"], sample.labels["resource"]
                if verb in ("create", "update", "patch", "delete"):
                    key = f"{verb} {resource}"
                    writes[key] = writes.get(key, 0) + sample.value
    return {"skips": skips, "writes_by": writes}


if __name__ == "__main__":
    sys.exit(main())
