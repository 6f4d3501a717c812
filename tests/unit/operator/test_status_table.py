"""`leasecron status`: one row per ScheduledJob from what the operator keeps in status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from leasecron.cli._kubectl import render_table
from leasecron.cli._status import HEADERS, human_delta, status_rows

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def job(name: str, namespace: str = "billing", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"bucket": "once-per-tick"},
        "status": status,
    }


def test_a_job_row_shows_holder_last_run_outcome_next_ready_and_replicas() -> None:
    obj = job(
        "report",
        holder="web-7f9-a1b2c3d4",
        lastRun={"start": "2026-03-01T11:59:15Z", "outcome": "Succeeded"},
        nextScheduleTime="2026-03-01T12:05:00Z",
        conditions=[{"type": "Ready", "status": "True", "reason": "HandlerRegistered"}],
        replicas=3,
    )
    [row], notes = status_rows([obj], now=NOW, with_namespace=False)
    assert row == [
        "report",
        "once-per-tick",
        "web-7f9-a1b2c3d4",
        "45s ago",
        "Succeeded",
        "in 5m",
        "True",
        "3",
    ]
    assert notes == []


def test_a_job_without_status_shows_dashes_and_not_ready_reasons_are_shown() -> None:
    fresh = job("fresh")
    broken = job(
        "broken", conditions=[{"type": "Ready", "status": "False", "reason": "NoReplicas"}]
    )
    rows, _ = status_rows([fresh, broken], now=NOW, with_namespace=True)
    assert rows[0][:2] == ["billing", "broken"] and rows[0][7] == "False (NoReplicas)"
    assert rows[1] == ["billing", "fresh", "once-per-tick", "-", "-", "-", "-", "-", "-"]


def test_the_table_aligns_columns_under_their_headers() -> None:
    table = render_table(HEADERS, [["a", "b", "c", "d", "e", "f", "g", "h"]])
    header, row = table.splitlines()
    assert header.index("BUCKET") == row.index("b")


def test_ages_read_like_kubectl() -> None:
    assert [human_delta(s) for s in (5, 119, 120, 7200, 3 * 86400)] == [
        "5s",
        "119s",
        "2m",
        "2h",
        "3d",
    ]
