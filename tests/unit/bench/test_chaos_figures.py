"""The chaos soak's fenced ledger and the figures computed from it (pure, no cluster)."""

from __future__ import annotations

from leasecron.bench._chaos_faults import FaultRecord
from leasecron.bench._chaos_figures import (
    due_ticks,
    missed_by_operator,
    outcomes_by_tick,
    takeovers,
    tick_figures,
)
from leasecron.bench._chaos_ledger import DUPLICATE, STALE, WRITTEN, FencedLedger

T0, T1, T2, T3 = (f"2026-12-01T10:00:0{s}Z" for s in (0, 2, 4, 6))


def test_the_ledger_refuses_a_token_below_the_highest_and_one_without_a_token() -> None:
    ledger = FencedLedger()
    assert ledger.invoice(job="j", tick=T1, token=5, replica="b") == WRITTEN
    assert ledger.invoice(job="j", tick=T0, token=4, replica="a") == STALE
    assert ledger.invoice(job="j", tick=T2, token=None, replica="a") == STALE
    assert ledger.invoice(job="other", tick=T0, token=1, replica="a") == WRITTEN
    assert [e.accepted for e in ledger.snapshot()] == [True, False, False, True]


def test_the_ledger_accepts_a_second_effect_of_a_tick_with_a_higher_token_as_a_duplicate() -> None:
    ledger = FencedLedger()
    assert ledger.invoice(job="j", tick=T0, token=1, replica="a") == WRITTEN
    assert ledger.invoice(job="j", tick=T0, token=2, replica="b") == DUPLICATE
    figures = tick_figures(jobs=["j"], due=[T0], effects=ledger.snapshot(), outcomes={})
    assert figures["duplicate_effects"] == 1
    assert figures["ticks_run_more_than_once"] == 1
    assert figures["of_those_refused_by_fence"] == 0


def test_a_tick_run_twice_whose_stale_run_was_refused_is_not_a_duplicate() -> None:
    ledger = FencedLedger()
    ledger.invoice(job="j", tick=T0, token=2, replica="b")
    ledger.invoice(job="j", tick=T0, token=1, replica="a")  # the paused one, after resuming
    figures = tick_figures(jobs=["j"], due=[T0], effects=ledger.snapshot(), outcomes={})
    assert figures["duplicate_effects"] == 0
    assert figures["of_those_refused_by_fence"] == 1
    assert figures["refused_writes"] == 1


def test_ticks_never_run_are_split_into_missed_failed_and_silent() -> None:
    ledger = FencedLedger()
    ledger.invoice(job="j", tick=T0, token=1, replica="a")
    ledger.invoice(job="j", tick=T3, token=5, replica="a")  # tokens 2-4 left no effect
    outcomes = {("j", T1): ["Missed"], ("j", T2): ["Abandoned"]}
    figures = tick_figures(
        jobs=["j"], due=[T0, T1, T2, T3], effects=ledger.snapshot(), outcomes=outcomes
    )
    assert figures["ticks_never_run"] == 2
    assert figures["never_run_alarmed_missed"] == 1
    assert figures["never_run_recorded_failed"] == 1
    assert figures["never_run_silent"] == 0

    silent = tick_figures(jobs=["j"], due=[T1], effects=ledger.snapshot(), outcomes={})
    assert silent["never_run_silent"] == 1
    assert silent["silent_ticks"][0]["claimed_unrun"] is True


def test_a_silent_tick_without_a_token_gap_is_not_marked_claimed() -> None:
    ledger = FencedLedger()
    ledger.invoice(job="j", tick=T0, token=1, replica="a")
    ledger.invoice(job="j", tick=T2, token=2, replica="a")
    figures = tick_figures(jobs=["j"], due=[T1], effects=ledger.snapshot(), outcomes={})
    assert figures["silent_ticks"][0]["claimed_unrun"] is False


def test_due_ticks_are_epoch_anchored_and_inclusive() -> None:
    start = 1796119200.5  # 2026-12-01T10:00:00.5Z
    assert due_ticks(start=start, end=start + 5.5, every=2.0) == [T1, T2, T3]


def test_the_takeover_of_a_fault_runs_to_the_first_accepted_effect_after_it() -> None:
    ledger = FencedLedger()
    ledger.invoice(job="j", tick=T0, token=1, replica="a")
    effects = ledger.snapshot()
    start = effects[0].at - 3.0
    longest = takeovers(
        timeline=[FaultRecord(kind="kill", start=start, end=start + 1.0, target="replica-1")],
        effects=effects,
        once_per_tick=["j"],
        single_owner="owner",
    )
    assert longest["kill"]["once_per_tick_s"] == 3.0
    assert longest["kill"]["single_owner_s"] is None


def test_missed_jobruns_without_a_holder_are_the_operators() -> None:
    def run(tick: str, holder: str, outcome: str) -> dict[str, object]:
        return {
            "spec": {"job": "j", "tick": tick, "holder": holder},
            "status": {"outcome": outcome},
        }

    jobruns = [run(T0, "", "Missed"), run(T1, "replica-1", "Missed"), run(T2, "", "Succeeded")]
    assert missed_by_operator(jobruns) == {("j", T0)}
    figures = tick_figures(
        jobs=["j"],
        due=[T0, T1],
        effects=[],
        outcomes=outcomes_by_tick(jobruns),
        by_operator=missed_by_operator(jobruns),
    )
    assert figures["never_run_alarmed_missed"] == 2
    assert figures["of_those_missed_by_operator"] == 1
