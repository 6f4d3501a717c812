"""The figures of `bench guards` and `bench requests`: bodies per tick (duplicates and
never-run ticks), writes per tick across replicas, tokens across ticks, starts per request,
latencies measured from the request's create, and the tick 0 a guard's timer aims at."""

from __future__ import annotations

from typing import Any

from leasecron.bench._guards import GuardResults, guards_report, pick_epoch
from leasecron.bench._processes import Message
from leasecron.bench._requests import Followed, RequestMade, requests_report


def _grant(replica: str, tick: int, *, token: int, lag: float = 0.05) -> Message:
    data = {"event": "grant", "job": 0, "tick": tick, "token": token, "lag": lag}
    return Message(replica=replica, data=data, received=0.0)


def _done(replica: str, *, writes: int, **extra: Any) -> Message:
    data = {"event": "done", "writes": writes, "requests": writes, "standby_requests": 0}
    data |= {"standby_seconds": 0.5, "writes_by": {"leases": float(writes)}, **extra}
    return Message(replica=replica, data=data, received=0.0)


def test_a_tick_run_twice_is_a_duplicate_and_a_tick_nobody_ran_is_never_run() -> None:
    grants = [_grant("a", 0, token=1), _grant("b", 0, token=2), _grant("a", 2, token=3)]
    results = GuardResults(grants=grants, done=[_done("a", writes=4), _done("b", writes=2)])

    figures, human = guards_report(results, replicas=2, ticks=3, variant="plain")

    assert figures["bodies"] == 3
    assert figures["duplicates"] == 1
    assert figures["never_run"] == 1
    assert figures["ticks_with_one_body"] == 1
    assert "never-run ticks" in human


def test_writes_per_tick_add_up_every_replica_and_tokens_must_rise_tick_to_tick() -> None:
    grants = [_grant("a", 0, token=5), _grant("b", 1, token=4)]
    done = [_done("a", writes=3), _done("b", writes=3, standby_requests=1)]

    figures, _ = guards_report(
        GuardResults(grants=grants, done=done), replicas=2, ticks=2, variant="plain"
    )

    assert figures["writes_per_tick"] == 3.0
    assert figures["writes_by_resource"] == {"leases": 6.0}
    assert figures["standby_requests"] == 1
    assert figures["standby_seconds"] == 1.0
    assert figures["tokens_increasing"] is False


def test_a_job_guard_reports_the_jobruns_found() -> None:
    results = GuardResults(
        grants=[_grant("a", 0, token=1)], done=[_done("a", writes=2)], jobruns={"Succeeded": 1}
    )

    figures, human = guards_report(results, replicas=1, ticks=1, variant="job")

    assert figures["jobruns"] == {"Succeeded": 1}
    assert "JobRuns found" in human


def test_tick_0_is_a_multiple_of_the_period_after_the_warm_up_ticks() -> None:
    epoch = pick_epoch(period=5.0, warm_up=1, now=1_000_001.0)

    assert epoch % 5.0 == 0
    assert epoch - 5.0 >= 1_000_001.0


def _followed(tick: float, *, sent: float, finished: float | None) -> Followed:
    made = RequestMade(name=f"bench-0-{int(tick)}", tick=tick, began=sent - 0.02, sent=sent)
    outcome = "Succeeded" if finished is not None else "Pending"
    return Followed(made=made, finished=finished, outcome=outcome)


def _start(replica: str, tick: float, t: float) -> Message:
    return Message(replica=replica, data={"event": "start", "tick": tick, "t": t}, received=t)


def test_request_latencies_run_from_the_create_and_count_each_request_once() -> None:
    followed = [
        _followed(100.0, sent=100.1, finished=100.4),
        _followed(102.0, sent=102.1, finished=None),
    ]
    starts = [_start("a", 100.0, 100.15), _start("b", 100.0, 100.3), _start("a", 105.0, 105.0)]

    figures, _ = requests_report(followed, starts, replicas=2)

    assert figures["started"] == 1
    assert figures["duplicates"] == 1
    assert figures["never_started"] == 1
    assert figures["starts_not_requested"] == 1
    assert figures["to_start_p50_ms"] == 50.0
    assert figures["to_finish_max_ms"] == 300.0
    assert figures["checks_p50_ms"] == 20.0
    assert figures["outcomes"] == {"Pending": 1, "Succeeded": 1}
