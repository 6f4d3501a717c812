"""The demo ledger: natural keys make a second run of a tick harmless, fencing rejects stale
tokens, and the single-owner's queue and terms are fenced the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from leasecron.demo._ledger import InvoiceOutcome, Ledger, StaleTokenError

JOB = "send-invoices"
KEY = "ns/send-invoices/2026-03-01T02:00:00Z"
TICK = "2026-03-01T02:00:00Z"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite").create()


def record(ledger: Ledger, *, key: str = KEY, token: int | None = 1) -> InvoiceOutcome:
    return ledger.record_invoice(job=JOB, key=key, tick=TICK, token=token, replica="replica-1")


def test_the_first_run_of_a_tick_writes_one_invoice_and_queues_its_mail(ledger: Ledger) -> None:
    assert record(ledger) is InvoiceOutcome.WRITTEN
    assert ledger.invoice_count() == 1
    assert ledger.queue_counts() == (1, 0)


def test_a_second_run_of_the_same_tick_is_ignored_but_counted_as_an_attempt(
    ledger: Ledger,
) -> None:
    record(ledger, token=1)
    assert record(ledger, token=2) is InvoiceOutcome.DUPLICATE
    assert ledger.invoice_count() == 1
    assert [a.outcome for a in ledger.attempts(job=JOB)] == ["written", "duplicate"]


def test_a_token_lower_than_the_highest_seen_is_rejected(ledger: Ledger) -> None:
    record(ledger, key="k-5", token=5)
    assert record(ledger, key="k-4", token=4) is InvoiceOutcome.STALE
    assert ledger.invoice_count() == 1
    assert [a.token for a in ledger.attempts(job=JOB)] == [5, 4]


def test_a_run_without_a_token_cannot_write(ledger: Ledger) -> None:
    assert record(ledger, token=None) is InvoiceOutcome.STALE
    assert ledger.invoice_count() == 0


def test_refresh_reads_every_customer_price(ledger: Ledger) -> None:
    prices = ledger.monthly_prices()
    assert sorted(prices) == ["acme", "globex", "initech"]
    assert all(cents >= 0 for cents in prices.values())


def test_a_term_takes_queued_mails_in_order_and_counts_them(ledger: Ledger) -> None:
    record(ledger, key="a", token=1)
    record(ledger, key="b", token=2)
    ledger.begin_term(job="queue-poller", token=1, replica="replica-2")
    first = ledger.take_next_mail(job="queue-poller", token=1, replica="replica-2")
    second = ledger.take_next_mail(job="queue-poller", token=1, replica="replica-2")
    assert first is not None and '"a"' in first
    assert second is not None and '"b"' in second
    assert ledger.take_next_mail(job="queue-poller", token=1, replica="replica-2") is None
    ledger.end_term(job="queue-poller", token=1)
    [term] = ledger.terms(job="queue-poller")
    assert (term.processed, term.ended_at is not None) == (2, True)


def test_an_old_term_cannot_take_mail_once_a_newer_term_began(ledger: Ledger) -> None:
    record(ledger)
    ledger.begin_term(job="queue-poller", token=1, replica="replica-1")
    ledger.begin_term(job="queue-poller", token=2, replica="replica-2")
    with pytest.raises(StaleTokenError):
        ledger.take_next_mail(job="queue-poller", token=1, replica="replica-1")
    with pytest.raises(StaleTokenError):
        ledger.begin_term(job="queue-poller", token=1, replica="replica-1")
    assert ledger.queue_counts() == (1, 0)
