"""`leasecron bench handover` and `bench failover`: how long a group is without a leader
when its leader's pod is terminated (SIGTERM: the Elector releases the Lease) or dies
(SIGKILL: a standby waits out leaseDuration on its own clock).

Each round signals the current leader, times until another replica's on_started_leading
(the parent's wall time before the signal to the replica's wall time in the callback: one
machine, one clock), then starts a replacement so the group keeps its size.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

from leasecron.bench._processes import Message, ReplicaGroup
from leasecron.bench._runs import BenchRun, bench_run, print_result
from leasecron.bench._stats import percentile, rounded, show, table


def _replica_argv(run: BenchRun, name: str, *, lease_duration: float) -> list[str]:
    return [
        "elect",
        "--through",
        run.through,
        "--namespace",
        run.namespace,
        "--identity",
        name,
        "--lease-duration",
        str(lease_duration),
    ]


def _spawn(run: BenchRun, group: ReplicaGroup, name: str, *, lease_duration: float) -> None:
    group.spawn(name, _replica_argv(run, name, lease_duration=lease_duration))
    group.wait_for(
        lambda m: m.replica == name and m.event == "ready", timeout=60.0, what=f"{name} ready"
    )


def _started_by_other(leader: str, *, since: float) -> Callable[[Message], bool]:
    def check(message: Message) -> bool:
        return (
            message.event == "started"
            and message.replica != leader
            and float(message.data.get("t", 0.0)) >= since
        )

    return check


def measure_elections(
    run: BenchRun,
    *,
    kill: signal.Signals,
    rounds: int,
    replicas: int,
    lease_duration: float,
) -> list[float]:
    """Seconds from signalling the leader to a standby leading, per round."""
    if replicas < 2 or rounds < 1:
        raise ValueError(f"need at least 2 replicas and 1 round, got {replicas} and {rounds}")
    group = run.group
    names = iter(f"replica-{i}" for i in range(10_000))
    for _ in range(replicas):
        _spawn(run, group, next(names), lease_duration=lease_duration)
    first = group.wait_for(
        lambda m: m.event == "started", timeout=lease_duration * 3 + 30, what="a first leader"
    )
    leader, seconds = first.replica, []
    timeout = lease_duration * 3 + 10
    for index in range(rounds):
        victim = group.replicas[leader]
        victim.expected_exit = True
        sent = time.time()
        victim.signal(kill)
        taken = group.wait_for(
            _started_by_other(leader, since=sent),
            timeout=timeout,
            what=f"a new leader in round {index + 1}",
        )
        seconds.append(float(taken.data["t"]) - sent)
        run.progress(f"round {index + 1}/{rounds}: {taken.replica} leads after {seconds[-1]:.3f}s")
        victim.stop()
        leader = taken.replica
        _spawn(run, group, next(names), lease_duration=lease_duration)
    return seconds


def election_report(
    kind: str, seconds: list[float], *, lease_duration: float, replicas: int
) -> tuple[dict[str, Any], str]:
    """The JSON figures and the human table of a handover or failover run."""
    figures: dict[str, Any] = {
        "bench": kind,
        "rounds": len(seconds),
        "replicas": replicas,
        "lease_duration_s": lease_duration,
        "p50_s": rounded(percentile(seconds, 0.5)),
        "p90_s": rounded(percentile(seconds, 0.9)),
        "max_s": rounded(max(seconds)),
        "min_s": rounded(min(seconds)),
        "samples_s": [round(s, 4) for s in seconds],
    }
    if kind == "handover":
        rows = [
            ("handover p50", show(figures["p50_s"], " s"), "<= 0.3 s"),
            ("handover max", show(figures["max_s"], " s"), "-"),
        ]
    else:
        bound = f"<= {lease_duration + 0.5:g} s (leaseDuration + 0.5 s)"
        rows = [
            ("failover p50", show(figures["p50_s"], " s"), bound),
            ("failover max", show(figures["max_s"], " s"), bound),
        ]
    title = f"{kind}: {len(seconds)} rounds, {replicas} replicas, leaseDuration {lease_duration:g}s"
    return figures, table(rows, title=title)


def run_elections(
    *,
    kind: str,
    rounds: int,
    replicas: int,
    lease_duration: float,
    through: str = "coordination",
    json_output: bool = False,
    kubeconfig: str | None = None,
) -> dict[str, Any]:
    """Run the `kind` ("handover": SIGTERM, "failover": SIGKILL) benchmark, print its table
    (and JSON), and return the figures."""
    kills = {"handover": signal.SIGTERM, "failover": signal.SIGKILL}
    if kind not in kills:
        raise ValueError(f"kind must be handover or failover, got {kind!r}")
    with bench_run(prefix=kind, through=through, kubeconfig=kubeconfig) as run:
        seconds = measure_elections(
            run, kill=kills[kind], rounds=rounds, replicas=replicas, lease_duration=lease_duration
        )
    figures, human = election_report(
        kind, seconds, lease_duration=lease_duration, replicas=replicas
    )
    print_result(figures, human, json_output=json_output)
    return figures
