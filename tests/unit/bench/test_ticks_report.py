"""The ticks report: runs past the startingDeadline, and through the runtime the time until
every JobRun was written, the JobRuns found, a start's lag split at its claim write, and the
warm-up jobs that put a claimed instant on every shard first."""

from __future__ import annotations

from typing import Any

from leasecron.bench._processes import Message
from leasecron.bench._runtime_ticks import warm_up_jobs
from leasecron.bench._ticks import TickResults, ticks_report
from leasecron.models.shards import shard_of

EPOCH = 1_000_000.0


def _grant(replica: str, job: int, tick: int, lag: float) -> Message:
    data = {"event": "grant", "job": job, "tick": tick, "lag": lag}
    return Message(replica=replica, data=data, received=0.0)


def _done(replica: str, **extra: Any) -> Message:
    data = {"event": "done", "writes": 4, "requests": 4, "standby_requests": 0}
    data |= {"standby_seconds": 0.0, **extra}
    return Message(replica=replica, data=data, received=0.0)


def _runtime_done(replica: str, idle_at: float | None) -> Message:
    return _done(
        replica,
        writes_by={"leases": 2.0, "jobruns": 2.0},
        rss_mb=80.0,
        cpu_s=1.0,
        record_backlog=0,
        records_idle_at=idle_at,
    )


def test_a_run_started_after_the_starting_deadline_is_counted_as_past_it() -> None:
    grants = [_grant("a", 0, 0, 0.01), _grant("a", 1, 0, 61.0)]
    results = TickResults(grants=grants, done=[_done("a")], epoch=EPOCH)

    figures, _ = ticks_report(results, replicas=1, jobs=2, ticks=1)

    assert (figures["runs"], figures["missed"], figures["past_deadline"]) == (2, 0, 1)


def test_all_jobruns_are_written_when_the_last_replica_emptied_its_backlog() -> None:
    grants = [_grant("a", 0, 0, 0.01), _grant("b", 0, 1, 0.02)]
    done = [_runtime_done("a", EPOCH + 1.5), _runtime_done("b", EPOCH + 3.25)]
    results = TickResults(grants=grants, done=done, epoch=EPOCH, jobruns={"Succeeded": 2})

    figures, human = ticks_report(results, replicas=2, jobs=1, ticks=2)

    assert figures["jobruns_written_s"] == 2.25  # from the last tick, EPOCH + 1
    assert figures["jobruns"] == {"Succeeded": 2}
    assert "2 (Succeeded 2)" in human


def test_a_replica_that_ran_nothing_does_not_count_for_the_jobruns_written() -> None:
    done = [_runtime_done("a", EPOCH + 0.5), _runtime_done("b", None)]
    results = TickResults(grants=[_grant("a", 0, 0, 0.01)], done=done, epoch=EPOCH)

    figures, _ = ticks_report(results, replicas=2, jobs=1, ticks=1)

    assert figures["jobruns_written_s"] == 0.5


def test_the_warm_up_has_one_job_on_every_shard() -> None:
    names = warm_up_jobs(16)

    assert [shard_of(name, shards=16) for name in names] == list(range(16))
    assert all(not name.startswith("bench-") for name in names)


def test_a_start_is_split_at_the_write_that_claimed_its_instant() -> None:
    grant = _grant("a", 0, 0, 0.050)
    grant.data.update(claim_sent=0.010, claim_answered=0.030)
    results = TickResults(grants=[grant, _grant("a", 0, 1, 0.02)], done=[_done("a")], epoch=EPOCH)

    figures, human = ticks_report(results, replicas=1, jobs=1, ticks=2)

    assert figures["claim_split_runs"] == 1
    assert (figures["claim_sent_p50_ms"], figures["claim_write_p50_ms"]) == (10.0, 20.0)
    assert figures["after_claim_p50_ms"] == 20.0
    assert "claim write answered in" in human


def test_at_rest_requests_and_watch_events_are_per_replica_per_minute() -> None:
    rest = {
        "seconds": 30.0,
        "requests": {"update leases/member": 3},
        "watch_events": {"MODIFIED leases": 3, "BOOKMARK scheduledjobs": 1},
        "watches_opened": {},
        "cpu_s": 0.1,
    }
    done = [_done("a", at_rest=rest), _done("b", at_rest=rest)]
    results = TickResults(grants=[_grant("a", 0, 0, 0.01)], done=done, epoch=EPOCH)

    figures, human = ticks_report(results, replicas=2, jobs=1, ticks=1)

    per_minute = figures["at_rest"]["per_replica_per_minute"]
    assert per_minute["requests"] == {"update leases/member": 6.0}
    assert per_minute["watch_events"] == {"BOOKMARK scheduledjobs": 2.0, "MODIFIED leases": 6.0}
    assert "at rest: update leases/member /min/replica" in human


def test_jobrun_writes_per_run_are_split_by_verb_and_the_ledger_is_counted() -> None:
    done = _runtime_done("a", EPOCH + 1.0)
    done.data["writes_by_kind"] = {"create jobruns": 2.0, "patch jobruns/status": 2.0}
    grants = [_grant("a", 0, 0, 0.01), _grant("a", 1, 0, 0.02)]
    results = TickResults(grants=grants, done=[done], epoch=EPOCH, ledger=(3, 2))

    figures, human = ticks_report(results, replicas=1, jobs=2, ticks=1)

    assert figures["jobrun_writes_per_run_by_verb"] == {"JobRun create": 1.0, "JobRun patch": 1.0}
    assert (figures["ledger_lines"], figures["ledger_ticks"]) == (3, 2)
    assert "3 (2)" in human


def test_a_request_names_the_role_of_a_named_lease() -> None:
    from leasecron.bench._through_runtime import request_kind

    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/leasecron-member-g-replica-0"
    assert request_kind("PUT", path) == "update leases/member"
    assert request_kind("GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases") == "list leases"
