"""`leasecron bench handover|failover|ticks|guards|requests|cronjob|operator|fencing|chaos`:
DESIGN.md section 8.

Thin click wiring over `leasecron.bench`; each command runs against the cluster of
$KUBECONFIG, or starts a throwaway local control plane when it is unset. Progress goes to
stderr, a table to stdout, and with --json the figures as the last line of stdout.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

import click

from leasecron.bench import run_elections, run_ticks
from leasecron.bench._cronjob import GENEROUS_FLAGS, run_cronjob
from leasecron.bench._drivers import DRIVERS
from leasecron.bench._processes import BenchError
from leasecron.bench._requests import RequestMade
from leasecron.cli._kubectl import Target
from leasecron.kube.clients import Kube
from leasecron.models.configs import ConfigError, to_timedelta
from leasecron.models.requests import request_tick
from leasecron.models.shards import DEFAULT_SHARDS, MAX_SHARDS
from leasecron.models.specs import Trigger

_json = click.option("--json", "json_output", is_flag=True, help="Print the figures as JSON last.")
_through = click.option(
    "--through",
    type=click.Choice(sorted(DRIVERS)),
    default="coordination",
    show_default=True,
    help="The code the replicas go through.",
)


def _run(function: Any, **kwargs: Any) -> None:
    try:
        function(**kwargs)
    except (BenchError, ValueError) as e:
        raise click.ClickException(str(e)) from e


@click.group("bench")
def bench() -> None:
    """Measure leasecron against a real API server (replicas are separate processes)."""


def _election_command(kind: str, summary: str) -> click.Command:
    @click.option("--rounds", default=5, show_default=True, help="Leaders to end, one by one.")
    @click.option("--replicas", default=3, show_default=True, help="Replica processes.")
    @click.option(
        "--lease-duration", default=2.0, show_default=True, help="leaseDuration in seconds."
    )
    @_through
    @_json
    def command(
        rounds: int, replicas: int, lease_duration: float, through: str, json_output: bool
    ) -> None:
        _run(
            run_elections,
            kind=kind,
            rounds=rounds,
            replicas=replicas,
            lease_duration=lease_duration,
            through=through,
            json_output=json_output,
        )

    command.__doc__ = summary
    return click.command(kind)(command)


bench.add_command(
    _election_command(
        "handover", "SIGTERM the leader of an Elector; time until a standby starts leading."
    )
)
bench.add_command(
    _election_command(
        "failover", "SIGKILL the leader of an Elector; time until a standby starts leading."
    )
)


@bench.command("ticks")
@click.option("--replicas", default=5, show_default=True, help="Replica processes.")
@click.option("--jobs", default=1, show_default=True, help="once-per-tick jobs.")
@click.option("--ticks", default=60, show_default=True, help="Ticks, one second apart.")
@click.option("--run-ms", default=200.0, show_default=True, help="How long each run lasts.")
@click.option(
    "--claim-step", default=0.1, show_default=True, help="Claim stagger per rendezvous rank (s)."
)
@click.option(
    "--shards",
    type=click.IntRange(1, MAX_SHARDS),
    default=DEFAULT_SHARDS,
    show_default=True,
    help="--through runtime: the shard count proposed for the group's record.",
)
@click.option(
    "--warm-up",
    is_flag=True,
    help="--through runtime: one job per shard runs 5 s before tick 0, so the shard Leases exist.",
)
@click.option(
    "--at-rest",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="--through runtime: then count each replica's requests and watch events for this "
    "many seconds with no tick due.",
)
@click.option(
    "--cpu-hogs",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Busy processes sharing the machine while the ticks run.",
)
@click.option(
    "--compare-cronjob",
    is_flag=True,
    help="Then run the CronJob controller with as many CronJobs (see `bench cronjob`).",
)
@_through
@_json
def ticks(
    replicas: int,
    jobs: int,
    ticks: int,
    run_ms: float,
    claim_step: float,
    shards: int,
    warm_up: bool,
    at_rest: float,
    cpu_hogs: int,
    compare_cronjob: bool,
    through: str,
    json_output: bool,
) -> None:
    """Replicas contend for every job's ticks (through the whole runtime on default-spec
    ScheduledJobs, or through the TickLock primitive alone)."""
    _run(
        run_ticks,
        replicas=replicas,
        jobs=jobs,
        ticks=ticks,
        run_ms=run_ms,
        claim_step=claim_step,
        shards=shards,
        warm_up=warm_up,
        at_rest=at_rest,
        cpu_hogs=cpu_hogs,
        compare_cronjob=compare_cronjob,
        through=through,
        json_output=json_output,
    )


def _seconds(value: str) -> float:
    try:
        return to_timedelta("--every", value).total_seconds()
    except ConfigError as e:
        raise click.BadParameter(str(e)) from e


@bench.command("guards")
@click.option("--replicas", default=5, show_default=True, help="Replica processes.")
@click.option("--ticks", default=30, show_default=True, help="Ticks measured.")
@click.option("--every", default="1s", show_default=True, help="Tick period (whole seconds).")
@click.option("--run-ms", default=100.0, show_default=True, help="How long each body lasts.")
@click.option("--stagger", default=0.2, show_default=True, help="The guards' stagger (s).")
@click.option(
    "--variants",
    default="plain,job",
    show_default=True,
    help="plain: Guard(every=); job: Guard(job=) of a ScheduledJob (a JobRun per run).",
)
@_json
def guards(
    replicas: int,
    ticks: int,
    every: str,
    run_ms: float,
    stagger: float,
    variants: str,
    json_output: bool,
) -> None:
    """Replicas each run a Guard of their own, fired by a plain timer loop at every tick:
    bodies per tick, tick -> body start lag, API writes per tick, standby requests."""
    from leasecron.bench._guards import run_guards

    _run(
        run_guards,
        replicas=replicas,
        ticks=ticks,
        every=_seconds(every),
        run_ms=run_ms,
        stagger=stagger,
        variants=tuple(v.strip() for v in variants.split(",") if v.strip()),
        json_output=json_output,
    )


async def _request_run(kube: Kube, namespace: str, job: str) -> RequestMade:
    """A run request made as `leasecron run JOB` makes it (its checks, then the create)."""
    from leasecron.cli import _runs

    began = time.time()
    user = await _runs.requester(kube, Target(kubeconfig=None, context=None, namespace=namespace))
    on_record = await _runs.read_job(kube, namespace=namespace, name=job)
    await _runs.check_runnable(kube, on_record, namespace=namespace, force=False, user=user)
    tick = request_tick(on_record.job.spec.parsed_schedule, now=datetime.now(UTC))
    if tick is None:
        raise BenchError(f"{job} has no second free of ticks to request")
    sent = time.time()
    name = await _runs.create_request(
        kube, on_record, namespace=namespace, tick=tick, trigger=Trigger.MANUAL, user=user
    )
    return RequestMade(name=name, tick=tick.timestamp(), began=began, sent=sent)


@bench.command("requests")
@click.option("--replicas", default=3, show_default=True, help="Replica processes.")
@click.option("--requests", default=20, show_default=True, help="Run requests, one at a time.")
@click.option("--run-ms", default=100.0, show_default=True, help="How long each run lasts.")
@_json
def requests_bench(replicas: int, requests: int, run_ms: float, json_output: bool) -> None:
    """Run-now latency: requests made as `leasecron run` makes them, one after another; time
    from the create to the handler start and to the JobRun finishing."""
    from leasecron.bench._requests import run_requests

    _run(
        run_requests,
        make_request=_request_run,
        replicas=replicas,
        requests=requests,
        run_ms=run_ms,
        json_output=json_output,
    )


@bench.command("cronjob")
@click.option("--jobs", default=1000, show_default=True, help="CronJobs on one minute.")
@click.option("--minutes", default=1, show_default=True, help="Whole minutes measured.")
@click.option(
    "--flags",
    default="default,generous",
    show_default=True,
    help="Controller flag sets, comma-separated (generous: " + " ".join(GENEROUS_FLAGS) + ").",
)
@_json
def cronjob(jobs: int, minutes: int, flags: str, json_output: bool) -> None:
    """The Kubernetes CronJob controller (its own kube-controller-manager): creation time of
    each Job minus its scheduled time, N CronJobs on one minute."""
    _run(
        run_cronjob,
        jobs=jobs,
        minutes=minutes,
        flag_sets=tuple(f.strip() for f in flags.split(",") if f.strip()),
        json_output=json_output,
    )


@bench.command("operator")
@click.option("--jobs", default=1000, show_default=True, help="ScheduledJobs to apply.")
@_json
def operator_bench(jobs: int, json_output: bool) -> None:
    """Time from applying N ScheduledJobs (and from operator cold start) to all Ready."""
    from leasecron.bench._operator import run_operator_bench

    _run(
        run_operator_bench,
        jobs=jobs,
        kubeconfig=os.environ.get("KUBECONFIG"),
        json_output=json_output,
    )


@bench.command("fencing")
@click.option("--writes", default=500, show_default=True, help="Upserts per method and round.")
@click.option("--rounds", default=20, show_default=True, help="Rounds (the median is shown).")
@click.option(
    "--url",
    envvar="LEASECRON_BENCH_POSTGRES_URL",
    default=None,
    help="A PostgreSQL SQLAlchemy URL (postgresql+psycopg://...); default: a throwaway server.",
)
@click.option(
    "--durable/--no-durable",
    default=True,
    show_default=True,
    help="The throwaway server's fsync (on: every commit reaches the disk).",
)
@_json
def fencing(writes: int, rounds: int, url: str | None, durable: bool, json_output: bool) -> None:
    """Fenced upserts (leasecron.fencing) against plain upserts on the same PostgreSQL,
    through SQLAlchemy and psycopg: writes per second, the price of the token check."""
    from leasecron.bench._fencing import run_fencing_bench

    _run(
        run_fencing_bench,
        writes=writes,
        rounds=rounds,
        url=url,
        durable=durable,
        json_output=json_output,
    )


@bench.command("chaos")
@click.option("--minutes", default=10.0, show_default=True, help="How long faults are injected.")
@click.option("--seed", type=int, default=None, help="The fault sequence's seed (printed).")
@click.option("--replicas", default=5, show_default=True, help="Replica processes at a time.")
@click.option(
    "--faults",
    "kinds",
    default="kill,stop,apiserver,etcd,partition,lost_reply,status_503",
    show_default=True,
    help="Comma-separated fault kinds to inject.",
)
@_json
def chaos(minutes: float, seed: int | None, replicas: int, kinds: str, json_output: bool) -> None:
    """The example app under kills, stops, apiserver/etcd restarts, partitions, lost replies
    and skewed clocks, with a fenced ledger counting duplicate effects and unalarmed ticks.
    Always on its own local control plane (it restarts kube-apiserver and etcd)."""
    from leasecron.bench._chaos import run_chaos

    _run(
        run_chaos,
        minutes=minutes,
        seed=seed,
        replicas=replicas,
        json_output=json_output,
        kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()),
    )
