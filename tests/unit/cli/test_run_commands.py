"""The pure parts of `leasecron run` and `backfill`: which replicas cover a handler (judged
by renewTime on this machine's clock), the times and pauses they take, and what a dry run
prints."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import click
import pytest

from leasecron.cli._backfill import parse_moment, parse_throttle, plan_lines
from leasecron.cli._runs import covering_replicas, describe_run
from leasecron.models.requests import BackfillPlan

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def member(holder: str, *, handlers: list[str], renewed_ago: float, duration: int = 15) -> dict:  # type: ignore[type-arg]
    renew = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {
            "name": f"leasecron-member-default-{holder}",
            "annotations": {"leasecron.dev/handlers": json.dumps(handlers)},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew},
    }


def test_only_live_members_that_registered_the_handler_cover_it() -> None:
    leases = [
        member("b", handlers=["report"], renewed_ago=1),
        member("a", handlers=["report", "other"], renewed_ago=2),
        member("stale", handlers=["report"], renewed_ago=30),
        member("elsewhere", handlers=["other"], renewed_ago=1),
    ]
    assert covering_replicas(leases, handler="report", now=NOW) == ["a", "b"]
    assert covering_replicas(leases, handler="missing", now=NOW) == []


def test_times_without_an_offset_are_utc_and_bad_ones_are_refused() -> None:
    assert parse_moment("2026-03-01T02:00:00Z") == datetime(2026, 3, 1, 2, tzinfo=UTC)
    assert parse_moment("2026-03-01T02:00") == datetime(2026, 3, 1, 2, tzinfo=UTC)
    assert parse_moment("2026-03-01T03:00:00+01:00") == datetime(2026, 3, 1, 2, tzinfo=UTC)
    with pytest.raises(click.BadParameter, match="not a time"):
        parse_moment("yesterday")
    assert parse_throttle("500ms") == timedelta(milliseconds=500)
    with pytest.raises(click.BadParameter, match="not a duration"):
        parse_throttle("soon")


def test_a_dry_run_lists_the_ticks_to_run_then_those_on_record() -> None:
    one, two = datetime(2026, 3, 1, 1, tzinfo=UTC), datetime(2026, 3, 1, 2, tzinfo=UTC)
    plan = BackfillPlan(run=(one, two), on_record=(), replaces_missed=frozenset({two}))
    assert plan_lines(plan) == [
        "2026-03-01T01:00:00Z",
        "2026-03-01T02:00:00Z  (replaces its Missed record)",
    ]


def test_a_finished_run_is_described_with_its_holder_token_and_message() -> None:
    obj = {
        "metadata": {"name": "report-20260301020000"},
        "spec": {"holder": "replica-a", "fencingToken": 4},
        "status": {"outcome": "Failed", "message": "RuntimeError: disk full"},
    }
    assert describe_run(obj) == (
        "report-20260301020000: Failed (holder replica-a, token 4): RuntimeError: disk full"
    )
