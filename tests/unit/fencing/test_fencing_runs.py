"""What the fencing helpers read from a run, and the errors that name a bad field."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from leasecron import JobContext
from leasecron.fencing import FencingError, RunRef, run_ref
from leasecron.models.specs import Bucket
from leasecron.runtime import GuardRun

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


@dataclass
class Run:
    namespace: object = "billing"
    job: object = "invoices"
    tick: object = TICK
    token: object = 7


def test_a_job_context_is_read_as_job_period_and_token() -> None:
    ctx = JobContext(
        job="invoices",
        namespace="billing",
        tick=TICK,
        holder="pod-1",
        bucket=Bucket.ONCE_PER_TICK,
        token=7,
    )
    assert run_ref(ctx) == RunRef("billing", "invoices", "2026-03-01T02:00:00Z", 7, "pod-1")


def test_a_guard_run_without_a_job_is_named_after_its_guard() -> None:
    run = GuardRun(guard="send-reminders", namespace="billing", tick=TICK, reason="taken")
    ref = run_ref(run)
    assert (ref.job, ref.token) == ("send-reminders", None)


def test_an_explicit_period_replaces_the_tick() -> None:
    assert run_ref(Run(), period="2026-03").period == "2026-03"


def test_a_run_without_a_token_is_refused_where_a_token_is_needed() -> None:
    ref = run_ref(Run(token=None))
    with pytest.raises(
        FencingError, match=r"fenced_upsert: .* has no fencing token \(token=None\)"
    ):
        ref.fenced("fenced_upsert")


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (Run(token="7"), r"run.token must be an integer, got '7' \(str\)"),
        (Run(token=7.0), r"run.token must be an integer, got 7.0 \(float\)"),
        (Run(token=True), r"run.token must be an integer, got True \(bool\)"),
        (Run(token=-1), r"run.token must be between 0 and \d+, got -1"),
        (Run(namespace=""), r"run.namespace must be a non-empty string, got ''"),
        (Run(job=None), r"run.job must be a non-empty string, got None"),
        (Run(tick="2026-03-01"), r"run.tick must be a datetime, got '2026-03-01'"),
        (Run(tick=datetime(2026, 3, 1)), r"run.tick must be timezone-aware, got 2026-03-01T00:00"),
    ],
)
def test_a_bad_field_is_named_with_its_value(run: Run, message: str) -> None:
    with pytest.raises(FencingError, match=message):
        run_ref(run)  # type: ignore[arg-type]


def test_a_fencing_error_is_a_value_error() -> None:
    assert issubclass(FencingError, ValueError)
