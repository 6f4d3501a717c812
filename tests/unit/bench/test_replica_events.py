"""A bench replica's events to its parent: those of measured runs are written by a thread
(`emit_soon`), the others before `emit` returns, all in the order they were emitted."""

from __future__ import annotations

import asyncio
import json

import pytest

from leasecron.bench import _drivers
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


def test_events_of_measured_runs_reach_the_writer_together_not_one_wake_up_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_drivers, "_SOON_S", 0.0)
    io = ReplicaIO()
    handed: list[object] = []
    lines = io._lines

    class Counted:
        def put(self, item: object) -> None:
            handed.append(item)
            lines.put(item)  # type: ignore[arg-type]

        def __getattr__(self, name: str) -> object:  # the writer's get, get_nowait
            return getattr(lines, name)

    monkeypatch.setattr(io, "_lines", Counted())

    async def runs() -> int:
        for i in range(100):
            io.emit_soon(event="grant", job=i)
        before = len(handed)
        await asyncio.sleep(0)  # the hand-over, queued for _SOON_S later
        await asyncio.sleep(0)
        return before

    before = asyncio.run(runs())
    io.close()

    assert before == 0
    assert len(handed) == 2  # the hundred events at once, then close's end of the lines
    written = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert written == [{"event": "grant", "job": i} for i in range(100)]
