"""One benchmark replica process: `python -m leasecron.bench._replica MODE --through DRIVER ...`

MODE is `elect` (contend for one leader Lease; SIGTERM stops with release), `ticks` (contend
for the ticks of `--jobs` jobs through their once-per-tick locks), `guards` (a Guard fired by a
timer loop, `--through guard`) or `requests` (run requests picked up by a Scheduler,
`--through runtime`). DRIVER names the code under test, so the same benchmark can go through
different layers (see `_drivers.DRIVERS`).

The protocol with the parent (`_processes.ReplicaGroup`), one JSON object per line:
- replica -> parent (stdout): {"event": "ready"} once connected and synced; elect:
  {"event": "started"|"stopped", "token", "t"} and {"event": "exit", ...}; ticks:
  {"event": "grant", "job", "tick", "token", "t", "lag"} and {"event": "done", counts...}
  (guards too); requests: {"event": "synced"} once the job is seen, {"event": "start",
  "tick", "token", "t"} per handler start.
  Every "t" is this process's wall time (time.time()).
- parent -> replica (stdin): ticks, guards: {"epoch": <wall time of tick 0>}. Closing stdin asks the
  replica to finish and exit.
Logs go to stderr. Uses $KUBECONFIG. With $LEASECRON_BENCH_PROFILE set to a directory, the
replica runs under cProfile and writes `<identity>.prof` there; $LEASECRON_BENCH_LOG_LEVEL sets its
log level (default warning); with $LEASECRON_BENCH_TRACE set to a file path, a runtime replica
times every request it sends and the parent writes them there as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from leasecron._logs import configure
from leasecron.bench._drivers import MODES, ReplicaIO, load_driver
from leasecron.models.shards import DEFAULT_SHARDS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m leasecron.bench._replica")
    p.add_argument("mode", choices=MODES)
    p.add_argument("--through", default="coordination")
    p.add_argument("--namespace", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--members", default="", help="comma-separated identities of all replicas")
    p.add_argument("--lease-duration", type=float, default=2.0, help="elect: seconds")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--ticks", type=int, default=10)
    p.add_argument("--period", type=float, default=1.0, help="ticks: seconds between ticks")
    p.add_argument("--run-ms", type=float, default=200.0, help="ticks: handler run time")
    p.add_argument("--starting-deadline", type=float, default=60.0, help="ticks: seconds")
    p.add_argument("--claim-step", type=float, default=0.1, help="ticks: stagger per rank")
    p.add_argument(
        "--shards", type=int, default=DEFAULT_SHARDS, help="ticks via runtime: shard count"
    )
    p.add_argument("--warm-up-jobs", type=int, default=0, help="ticks via runtime: extra jobs")
    p.add_argument("--at-rest", type=float, default=0.0, help="ticks via runtime: seconds")
    p.add_argument("--ledger", default="", help="ticks via runtime: the runs' ledger directory")
    p.add_argument("--job", default="", help="guards: the ScheduledJob of a job= guard")
    p.add_argument("--stagger", type=float, default=0.2, help="guards: seconds")
    p.add_argument("--warm-up", type=int, default=1, help="guards: ticks before the epoch")
    p.add_argument("--log-level", default=os.environ.get("LEASECRON_BENCH_LOG_LEVEL", "warning"))
    return p


async def _main(args: argparse.Namespace) -> None:
    driver = load_driver(args.mode, args.through)
    io = ReplicaIO()
    try:
        await io.open()
        await driver(args, io)
    finally:
        io.close()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    configure(level=args.log_level)
    profile_dir = os.environ.get("LEASECRON_BENCH_PROFILE")
    if not profile_dir:
        asyncio.run(_main(args))
        return
    import cProfile

    with cProfile.Profile() as profile:
        asyncio.run(_main(args))
    profile.dump_stats(os.path.join(profile_dir, f"{args.identity}.prof"))


if __name__ == "__main__":
    main()
