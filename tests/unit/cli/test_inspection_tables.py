"""The tables of `kubectl leasecron status|leases|runs` from raw objects, without a cluster:
the status read from Leases and JobRuns when the operator is not running (and the note that
says so), who holds which Lease with its token, expiry and tick, and a job's runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from leasecron.cli._inspect import lease_rows, run_rows
from leasecron.cli._status import NO_OPERATOR, NO_STATUS, Cluster, status_rows
from leasecron.models.groups import group_lease_name, shard_ref
from leasecron.models.shards import DEFAULT_SHARDS

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def job(name: str, *, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "billing"},
        "spec": {"bucket": "once-per-tick", "schedule": "*/5 * * * *", **spec},
        "status": status or {},
    }


def lease(
    name: str,
    *,
    role: str,
    holder: str = "",
    renewed: str = "2026-03-01T11:59:55.000000Z",
    duration: int = 15,
    transitions: int = 0,
    namespace: str = "billing",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration, "leaseTransitions": transitions}
    if holder:
        spec |= {"holderIdentity": holder, "renewTime": renewed, "acquireTime": renewed}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"leasecron.dev/role": role, **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def jobrun(
    name: str, *, tick: str, outcome: str, token: int, end: str | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "billing",
            "creationTimestamp": tick,
            "labels": {"leasecron.dev/job": "report"},
        },
        "spec": {
            "job": "report",
            "tick": tick,
            "holder": "web-1",
            "fencingToken": token,
            "start": tick,
        },
        "status": {"outcome": outcome, **({"end": end} if end else {})},
    }


REPORT_SHARD = shard_ref("default", "report", shards=DEFAULT_SHARDS).lease
REPORT_LEASE = lease(
    REPORT_SHARD,
    role="shard",
    holder="web-1",
    transitions=7,
    labels={"leasecron.dev/group": "default"},
    annotations={"leasecron.dev/tick": "2026-03-01T11:55:00Z"},
)
MEMBERS = [
    lease(
        f"member-{n}",
        role="member",
        holder=f"web-{n}",
        labels={"leasecron.dev/group": "default"},
        annotations={"leasecron.dev/handlers": '["report"]'},
    )
    for n in (1, 2)
]
RUNS = [
    jobrun("report-20260301115000", tick="2026-03-01T11:50:00Z", outcome="Succeeded", token=6),
    jobrun("report-20260301115500", tick="2026-03-01T11:55:00Z", outcome="Failed", token=7),
]


def test_without_an_operator_status_is_read_from_leases_and_jobruns_and_says_so() -> None:
    cluster = Cluster(leases=[REPORT_LEASE, *MEMBERS], runs=RUNS)
    [row], notes = status_rows([job("report")], now=NOW, with_namespace=False, cluster=cluster)
    assert row == ["report", "once-per-tick", "web-1", "5m ago", "Failed", "in 5m", "-", "2"]
    assert notes == [NO_OPERATOR]


OPERATOR_LABELS = [
    pytest.param(
        {"role": "leader", "labels": {"app.kubernetes.io/component": "operator"}}, id="now"
    ),
    pytest.param({"role": "operator"}, id="written-by-earlier-versions"),
]


@pytest.mark.parametrize("labels", OPERATOR_LABELS)
def test_with_a_live_operator_its_status_is_shown_and_only_unwritten_jobs_fall_back(
    labels: dict[str, Any],
) -> None:
    operator = lease("leasecron-operator", holder="op-1", namespace="system", **labels)
    written = job(
        "written",
        status={"observedGeneration": 1, "holder": "op-says", "replicas": 5},
    )
    cluster = Cluster(leases=[operator, REPORT_LEASE, *MEMBERS], runs=RUNS)
    rows, notes = status_rows(
        [written, job("report")], now=NOW, with_namespace=False, cluster=cluster
    )
    assert [r[2] for r in rows] == ["web-1", "op-says"]
    assert notes == [NO_STATUS.format(count=1)]


def test_an_expired_grant_has_no_holder_in_the_fallback() -> None:
    stale = lease(REPORT_SHARD, role="shard", holder="web-9", renewed="2026-03-01T11:00:00.000000Z")
    [row], _ = status_rows(
        [job("report")], now=NOW, with_namespace=False, cluster=Cluster(leases=[stale])
    )
    assert row[2] == "-"


def test_a_once_per_tick_job_is_held_by_the_shard_lease_its_group_record_places_it_on() -> None:
    record = lease(
        group_lease_name("default"),
        role="group",
        labels={"leasecron.dev/group": "default"},
        annotations={"leasecron.dev/shards": "4"},
    )
    placed = shard_ref("default", "report", shards=4).lease
    held = lease(placed, role="shard", holder="web-2", duration=10)
    cluster = Cluster(leases=[record, held, REPORT_LEASE, *MEMBERS], runs=RUNS)
    [row], _ = status_rows([job("report")], now=NOW, with_namespace=False, cluster=cluster)
    assert row[2] == "web-2"
    # Without a readable record the default shard count places it.
    broken = {**record, "metadata": {**record["metadata"], "annotations": {}}}
    cluster = Cluster(leases=[broken, held, REPORT_LEASE, *MEMBERS], runs=RUNS)
    [row], _ = status_rows([job("report")], now=NOW, with_namespace=False, cluster=cluster)
    assert row[2] == "web-1"


def test_leases_show_role_job_holder_token_expiry_and_tick() -> None:
    free = lease(
        "leasecron-shard-default-16-0", role="shard", labels={"leasecron.dev/group": "default"}
    )
    owner = lease(
        "leasecron-job-report",
        role="job",
        holder="web-1",
        transitions=7,
        labels={"leasecron.dev/job": "report"},
        annotations={"leasecron.dev/tick": "2026-03-01T11:55:00Z"},
    )
    rows = lease_rows([owner, free], now=NOW, with_namespace=False, wide=True)
    assert rows == [
        [
            "leasecron-job-report",
            "job",
            "report",
            "web-1",
            "7",
            "in 10s",
            "2026-03-01T11:55:00Z",
            "5s ago",
            "5s ago",
            "15s",
        ],
        [
            "leasecron-shard-default-16-0",
            "shard",
            "default",
            "-",
            "0",
            "free",
            "-",
            "-",
            "-",
            "15s",
        ],
    ]


def test_runs_are_listed_newest_first_with_token_outcome_and_duration() -> None:
    finished = jobrun(
        "report-20260301114500",
        tick="2026-03-01T11:45:00Z",
        outcome="Succeeded",
        token=5,
        end="2026-03-01T11:45:02.5Z",
    )
    rows = run_rows([finished, *RUNS], now=NOW, with_namespace=True)
    assert [r[1] for r in rows] == [
        "report-20260301115500",
        "report-20260301115000",
        "report-20260301114500",
    ]
    assert rows[2] == [
        "billing",
        "report-20260301114500",
        "2026-03-01T11:45:00Z",
        "web-1",
        "5",
        "Succeeded",
        "2.5s",
        "15m ago",
    ]
