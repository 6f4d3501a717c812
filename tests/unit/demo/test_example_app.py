"""The example app's handlers, called with hand-made JobContexts: idempotent and fenced
invoices, a per-replica cache, and a queue poller that stops when its grant is lost."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from leasecron import JobContext
from leasecron.demo._ledger import Ledger, StaleTokenError
from leasecron.demo.example_app import Events, ExampleApp
from leasecron.models.specs import Bucket

TICK = datetime(2026, 3, 1, 2, 0, 2, tzinfo=UTC)


class RecordingEvents(Events):
    """Events that also keep what was emitted and let a test wait for an outcome."""

    def __init__(self) -> None:
        super().__init__(replica="replica-1-0a1b2c3d")
        self.seen: list[dict[str, Any]] = []
        self._changed = threading.Condition()

    def emit(self, event: str, **fields: Any) -> None:
        super().emit(event, **fields)
        with self._changed:
            self.seen.append({"event": event, **fields})
            self._changed.notify_all()

    def wait_outcome(self, outcome: str, *, timeout: float = 10.0) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: any(e.get("outcome") == outcome for e in self.seen), timeout
            )


@pytest.fixture
def app(tmp_path: Path) -> ExampleApp:
    ledger = Ledger(tmp_path / "ledger.sqlite").create()
    return ExampleApp(ledger=ledger, events=RecordingEvents())


def ctx(job: str, bucket: Bucket, *, token: int | None = None, tick: datetime = TICK) -> JobContext:
    return JobContext(
        job=job,
        namespace="demo",
        tick=tick,
        holder="replica-1-0a1b2c3d",
        bucket=bucket,
        token=token,
    )


def printed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The event lines on stdout (an unconfigured structlog also prints there)."""
    lines = capsys.readouterr().out.splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"ts"')]


def test_refresh_cache_fills_this_replicas_cache_and_reports_the_run(
    app: ExampleApp, capsys: pytest.CaptureFixture[str]
) -> None:
    app.refresh_cache(ctx("refresh-cache", Bucket.EVERY_REPLICA))
    [event] = printed(capsys)
    assert len(app.prices) == event["entries"] == 3
    assert (event["event"], event["job"], event["tick"]) == (
        "run",
        "refresh-cache",
        "2026-03-01T02:00:02Z",
    )


def test_a_tick_sent_twice_bills_once(app: ExampleApp, capsys: pytest.CaptureFixture[str]) -> None:
    app.send_invoices(ctx("send-invoices", Bucket.ONCE_PER_TICK, token=4))
    app.send_invoices(ctx("send-invoices", Bucket.ONCE_PER_TICK, token=5))
    assert [e["outcome"] for e in printed(capsys)] == ["written", "duplicate"]
    assert app.ledger.invoice_count() == 1


def test_a_run_with_an_outdated_token_is_rejected_and_fails(
    app: ExampleApp, capsys: pytest.CaptureFixture[str]
) -> None:
    app.send_invoices(ctx("send-invoices", Bucket.ONCE_PER_TICK, token=9))
    later = TICK.replace(second=4)
    with pytest.raises(StaleTokenError):
        app.send_invoices(ctx("send-invoices", Bucket.ONCE_PER_TICK, token=8, tick=later))
    assert [e["outcome"] for e in printed(capsys)] == ["written", "stale"]


def test_the_queue_poller_sends_queued_mail_until_its_grant_is_lost(
    app: ExampleApp, capsys: pytest.CaptureFixture[str]
) -> None:
    app.send_invoices(ctx("send-invoices", Bucket.ONCE_PER_TICK, token=1))
    term = ctx("queue-poller", Bucket.SINGLE_OWNER, token=3)
    poller = threading.Thread(target=app.queue_poller, args=(term,))
    poller.start()
    assert isinstance(app.events, RecordingEvents)
    assert app.events.wait_outcome("mailed")
    term.lost.set()
    poller.join(timeout=10)
    assert not poller.is_alive()
    outcomes = [e["outcome"] for e in printed(capsys) if e["job"] == "queue-poller"]
    assert outcomes == ["term-started", "mailed", "term-ended"]
    [record] = app.ledger.terms(job="queue-poller")
    assert (record.token, record.processed, record.ended_at is not None) == (3, 1, True)
