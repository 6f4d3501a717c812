"""The chaos soak's figure for fencing off: what the same run would have written had the store
not checked the token (pure, no cluster)."""

from __future__ import annotations

from leasecron.bench._chaos_figures import tick_figures
from leasecron.bench._chaos_ledger import FencedLedger

T0, T1 = "2026-12-01T10:00:00Z", "2026-12-01T10:00:02Z"


def test_a_refused_stale_run_is_a_duplicate_only_with_fencing_off() -> None:
    ledger = FencedLedger()
    ledger.invoice(job="j", tick=T0, token=2, replica="successor")
    ledger.invoice(job="j", tick=T0, token=1, replica="stalled")  # resumed after its grant
    ledger.invoice(job="j", tick=T1, token=2, replica="successor")
    figures = tick_figures(jobs=["j"], due=[T0, T1], effects=ledger.snapshot(), outcomes={})
    assert (figures["duplicate_effects"], figures["duplicate_effects_without_fencing"]) == (0, 1)


def test_ticks_run_once_are_no_duplicates_either_way() -> None:
    ledger = FencedLedger()
    for tick in (T0, T1):
        ledger.invoice(job="j", tick=tick, token=1, replica="r")
    figures = tick_figures(jobs=["j"], due=[T0, T1], effects=ledger.snapshot(), outcomes={})
    assert (figures["duplicate_effects"], figures["duplicate_effects_without_fencing"]) == (0, 0)
