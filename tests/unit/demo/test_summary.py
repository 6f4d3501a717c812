"""The demo's figures: ticks in the window, runs per bucket, duplicates and missed ticks."""

from __future__ import annotations

from datetime import UTC, datetime

from leasecron.demo._ledger import Attempt, Term
from leasecron.demo._summary import Failover, Window, summarize
from leasecron.models.names import format_tick

START = datetime(2026, 3, 1, 2, 0, 0, tzinfo=UTC).timestamp()


def tick(offset: int) -> str:
    return format_tick(datetime.fromtimestamp(START + offset, UTC))


def attempt(offset: int, outcome: str = "written") -> Attempt:
    return Attempt(tick=tick(offset), token=offset, replica="r", outcome=outcome, at=0.0)


def summary_of(
    attempts: list[Attempt], *, refresh: list[tuple[str, str]] | None = None
) -> dict[str, object]:
    return summarize(
        replicas=3,
        window=Window(start=START, end=START + 10),
        attempts=attempts,
        refresh_runs=refresh or [],
        terms=[
            Term(job="q", token=t, replica="r", started_at=0, ended_at=None, processed=0)
            for t in (1, 3)
        ],
        invoices=0,
        mails=(0, 0),
        jobruns=(0, 0),
        failover=Failover(killed="a", took_over="b", takeover_s=3.21),
    ).as_json()


def test_the_window_counts_ticks_after_its_start_up_to_its_end() -> None:
    window = Window(start=START, end=START + 10)
    assert window.ticks("send-invoices") == [tick(s) for s in (2, 4, 6, 8, 10)]
    assert window.ticks("refresh-cache") == [tick(5), tick(10)]


def test_one_run_per_tick_gives_no_duplicates_and_no_missed_ticks() -> None:
    figures = summary_of([attempt(s) for s in (2, 4, 6, 8, 10)])
    assert (figures["ticks"], figures["duplicates"], figures["missed"]) == (5, 0, 0)
    assert figures["runs"] == {"every-replica": 0, "once-per-tick": 5, "single-owner-terms": 2}


def test_a_tick_run_twice_is_a_duplicate_and_a_tick_not_run_is_missed() -> None:
    figures = summary_of([attempt(2), attempt(2, "duplicate"), attempt(6), attempt(8)])
    assert (figures["duplicates"], figures["missed"]) == (1, 2)
    assert figures["runs"]["once-per-tick"] == 4  # type: ignore[index]


def test_runs_outside_the_window_are_not_counted_as_runs_but_still_as_duplicates() -> None:
    figures = summary_of([attempt(0), attempt(0), attempt(12), *(attempt(s) for s in (2, 4))])
    assert figures["runs"]["once-per-tick"] == 2  # type: ignore[index]
    assert figures["duplicates"] == 1


def test_every_replica_runs_count_only_ticks_of_that_job_in_the_window() -> None:
    runs = [(tick(5), r) for r in "abc"] + [(tick(10), r) for r in "ab"] + [(tick(15), "a")]
    figures = summary_of([], refresh=runs)
    assert (figures["every_replica_ticks"], figures["runs"]["every-replica"]) == (2, 5)  # type: ignore[index]
    assert figures["every_replica_repeats"] == 0


def test_a_replica_running_the_same_every_replica_tick_twice_is_a_repeat() -> None:
    figures = summary_of([], refresh=[(tick(5), "a"), (tick(5), "a"), (tick(5), "b")])
    assert figures["every_replica_repeats"] == 1


def test_the_takeover_time_is_reported_in_seconds() -> None:
    figures = summary_of([])
    assert (figures["killed"], figures["took_over"], figures["takeover_s"]) == ("a", "b", 3.21)
