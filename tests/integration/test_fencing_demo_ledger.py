"""The example app's ledger on PostgreSQL (a URL instead of the default SQLite file): the same
fence, period claim and natural key through leasecron.fencing, on a real server."""

from __future__ import annotations

import pytest

from leasecron.demo._ledger import InvoiceOutcome, Ledger, StaleTokenError
from leasecron.testing._stores import PostgresDatabase

TICK = "2026-03-01T02:00:00Z"
KEY = f"ns/send-invoices/{TICK}"


def test_the_demo_ledger_on_postgresql_bills_a_tick_once_and_refuses_stale_tokens(
    postgres_database: PostgresDatabase,
) -> None:
    ledger = Ledger(postgres_database.url).create(fresh=True)
    try:
        record = {"job": "send-invoices", "key": KEY, "tick": TICK, "replica": "r1"}
        assert ledger.record_invoice(**record, token=2) is InvoiceOutcome.WRITTEN
        assert ledger.record_invoice(**record, token=3) is InvoiceOutcome.DUPLICATE
        assert ledger.record_invoice(**record, token=1) is InvoiceOutcome.STALE
        assert (ledger.invoice_count(), ledger.queue_counts()) == (1, (1, 0))
        ledger.begin_term(job="queue-poller", token=5, replica="r2")
        with pytest.raises(StaleTokenError):
            ledger.begin_term(job="queue-poller", token=4, replica="r1")
        assert ledger.take_next_mail(job="queue-poller", token=5, replica="r2") is not None
    finally:
        ledger.close()
