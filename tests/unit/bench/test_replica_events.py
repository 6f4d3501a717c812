"""A bench replica's events to its parent: those of measured runs are written by a thread
(`emit_soon`), the others before `emit` returns, all in the order they were emitted."""

from __future__ import annotations

import json

import pytest

from leasecron.bench._drivers import ReplicaIO


def test_events_are_written_in_the_order_emitted_and_all_by_close(
    capsys: pytest.CaptureFixture[str],
) -> None:
    io = ReplicaIO()
    for i in range(50):
        io.emit_soon(event="grant", job=i)
    io.emit(event="done")  # written, after the ones queued before it, when this returns
    written = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    io.emit_soon(event="grant", job=50)
    io.close()
    written += [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert written[:50] == [{"event": "grant", "job": i} for i in range(50)]
    assert written[50:] == [{"event": "done"}, {"event": "grant", "job": 50}]
