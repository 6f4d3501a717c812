"""The chaos soak's effects store on a real PostgreSQL: the job's fence decides what lands,
and a tick that landed twice is counted from the table."""

from __future__ import annotations

from leasecron.bench._chaos_ledger import DUPLICATE, STALE, WRITTEN, FencedLedger
from leasecron.bench._chaos_store import PostgresEffects
from leasecron.testing import PostgresDatabase

T0 = "2026-12-01T10:00:00Z"


def test_the_fence_in_postgresql_refuses_a_stale_effect_and_counts_a_tick_landed_twice(
    postgres_database: PostgresDatabase,
) -> None:
    store = PostgresEffects(postgres_database.url).create()
    ledger = FencedLedger(store=store)
    try:
        assert ledger.invoice(job="j", tick=T0, token=2, replica="successor") == WRITTEN
        assert ledger.invoice(job="j", tick=T0, token=1, replica="stalled") == STALE
        assert ledger.invoice(job="j", tick=T0, token=None, replica="unguarded") == STALE
        assert store.duplicate_effects() == 0
        assert ledger.invoice(job="j", tick=T0, token=3, replica="next") == DUPLICATE
        assert store.duplicate_effects() == 1
        assert ledger.term(kind="begin", job="q", token=4, replica="owner") == (True, None)
        assert ledger.term(kind="take", job="q", token=3, replica="old") == (False, None)
    finally:
        ledger.close()
        store.close()
