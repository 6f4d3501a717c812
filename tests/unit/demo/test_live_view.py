"""The demo's live bookkeeping and its lines: runs per tick, ownership terms and takeovers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from leasecron.demo._live import LiveState
from leasecron.demo._replicas import Event, parse_event
from leasecron.demo._view import LeaseView, Run, TickLine, format_tick_line, short

TICK = "2026-03-01T02:00:02Z"


def event(replica: str, **fields: Any) -> Event:
    line = json.dumps({"event": "run", "replica": replica, "ts": 100.0, **fields})
    parsed = parse_event(pod="replica-x", line=line, received=101.0)
    assert parsed is not None
    return parsed


def test_lines_that_are_not_events_are_ignored() -> None:
    assert parse_event(pod="p", line="Traceback (most recent call last):", received=0) is None
    assert parse_event(pod="p", line='{"no": "event"}', received=0) is None
    assert parse_event(pod="p", line="[1, 2]", received=0) is None


def test_an_event_keeps_its_own_clock_and_extra_fields() -> None:
    parsed = event("r-1", job="queue-poller", token=3, outcome="mailed", processed=2)
    assert (parsed.ts, parsed.received, parsed.token) == (100.0, 101.0, 3)
    assert parsed.extra == {"processed": 2}


def test_runs_are_grouped_by_tick_and_cache_runs_are_taken_once() -> None:
    state = LiveState()
    state.apply(event("r-1", job="send-invoices", tick=TICK, token=7, outcome="written"))
    state.apply(event("r-1", job="refresh-cache", tick=TICK, outcome="refreshed"))
    state.apply(event("r-2", job="refresh-cache", tick=TICK, outcome="refreshed"))
    assert state.invoices[TICK] == [Run(replica="r-1", token=7, outcome="written")]
    assert sorted(state.take_cache_runs()) == ["r-1", "r-2"]
    assert state.take_cache_runs() == []
    assert state.refresh_runs == [(TICK, "r-1"), (TICK, "r-2")]


def test_the_current_term_is_the_newest_one_that_has_not_ended() -> None:
    state = LiveState()
    state.apply(event("r-1", job="queue-poller", token=1, outcome="term-started"))
    state.apply(event("r-1", job="queue-poller", token=1, outcome="mailed", processed=4))
    assert state.poller_run() == Run(replica="r-1", token=1, outcome="4 mails")
    state.apply(event("r-1", job="queue-poller", token=1, outcome="term-ended"))
    assert state.current_term() is None


def test_the_terms_of_a_killed_replica_end_without_a_word_from_it() -> None:
    state = LiveState()
    state.apply(event("r-1", job="queue-poller", token=1, outcome="term-started"))
    state.mark_dead("r-1")
    assert state.poller_run() is None


def test_the_successor_is_another_replica_with_a_higher_token() -> None:
    state = LiveState()
    state.apply(event("r-1", job="queue-poller", token=1, outcome="term-started"))
    assert state.successor_of(replica="r-1", token=1) is None
    state.apply(event("r-2", job="queue-poller", token=2, outcome="term-started"))
    successor = state.successor_of(replica="r-1", token=1)
    assert successor is not None and (successor.replica, successor.token) == ("r-2", 2)


def test_a_tick_line_names_runs_tokens_and_lease_holders_by_their_readable_part() -> None:
    line = format_tick_line(
        TickLine(
            elapsed=12.0,
            tick=datetime(2026, 3, 1, 2, 0, 2, tzinfo=UTC),
            invoices=[Run(replica="replica-2-0a1b2c3d", token=7, outcome="written")],
            cache=["replica-3-0a1b2c3d", "replica-1-0a1b2c3d"],
            poller=Run(replica="replica-1-0a1b2c3d", token=1, outcome="3 mails"),
            leases={"queue-poller": LeaseView(holder="replica-1-0a1b2c3d", transitions=1)},
        )
    )
    assert "invoices: replica-2 #7 written" in line
    assert "cache: replica-1 replica-3" in line
    assert "poller: replica-1 #1 (3 mails)" in line
    assert "queue-poller=replica-1/1" in line
    assert short("") == "-"
