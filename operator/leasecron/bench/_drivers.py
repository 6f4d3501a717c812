"""The drivers a benchmark replica can go through, and the stdin/stdout of a replica.

A driver is a module with an `async def MODE(args, io)` for some of the `MODES` (args: the
replica's argparse namespace, io: a `ReplicaIO`), listed in `DRIVERS` under the name
`--through` selects. `coordination` drives TickLock and Elector directly; `runtime` runs the
in-pod Scheduler on real ScheduledJobs (shard claims, JobRun records; `requests`: run
requests picked up); `guard` runs a `Guard` fired by a timer loop (`guards`). The message
protocol is described in `_replica`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import queue
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

DRIVERS: dict[str, str] = {
    "coordination": "leasecron.bench._through_coordination",
    "guard": "leasecron.bench._through_guard",
    "runtime": "leasecron.bench._through_runtime",
}
MODES = ("elect", "ticks", "guards", "requests")
_SOON_S = 0.1
"""How long an event of `emit_soon` waits to be handed to the writer with the others."""


def bench_job(index: int) -> str:
    """The name of the `index`th job of a ticks benchmark (its Lease: job_lease_name)."""
    return f"bench-{index}"


class ReplicaIO:
    """stdout events and stdin commands of one replica, for the drivers. Build it inside the
    running loop, then `await io.open()`."""

    def __init__(self) -> None:
        self._commands: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.stdin_closed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._lines: queue.SimpleQueue[tuple[str, threading.Event | None] | None]
        self._lines = queue.SimpleQueue()
        self._soon: list[dict[str, Any]] = []
        self._handing: asyncio.TimerHandle | None = None
        self._writer = threading.Thread(target=self._write_lines, name="bench events", daemon=True)
        self._writer.start()

    async def open(self) -> None:
        """Start reading stdin (through the loop: no thread left blocked at exit)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        self._reader = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while raw := await reader.readline():
            try:
                data = json.loads(raw)
            except ValueError:
                continue
            if isinstance(data, dict):
                self._commands.put_nowait(data)
        self.stdin_closed.set()
        self._commands.put_nowait(None)

    def emit(self, **fields: Any) -> None:
        """One event line on stdout, written before this returns (after the lines queued by
        `emit_soon`, in order)."""
        self._hand_over()
        written = threading.Event()
        self._lines.put((json.dumps(fields) + "\n", written))
        written.wait()

    def emit_soon(self, **fields: Any) -> None:
        """One event line on stdout, written soon by the writer thread: for the events sent
        from inside measured runs (the parent reads five replicas' lines, and a full pipe
        must not stall the loop whose starts are measured). Kept, and handed to the writer
        `_SOON_S` later with the others of that time: a thread woken per event takes the
        interpreter lock from the loop thousands of times during the starts measured."""
        self._soon.append(fields)
        if self._handing is None:
            with contextlib.suppress(RuntimeError):  # no loop: handed over by emit, close
                loop = asyncio.get_running_loop()
                self._handing = loop.call_later(_SOON_S, self._hand_over)

    def _hand_over(self) -> None:
        if self._handing is not None:
            self._handing.cancel()
            self._handing = None
        if self._soon:
            soon, self._soon = self._soon, []
            self._lines.put(("".join(json.dumps(fields) + "\n" for fields in soon), None))

    def close(self) -> None:
        """Write every event emitted so far, then stop the writer."""
        self._hand_over()
        self._lines.put(None)
        self._writer.join()

    def _write_lines(self) -> None:
        while (item := self._lines.get()) is not None:
            told = []
            with contextlib.suppress(queue.Empty):  # the lines queued meanwhile, then flush
                while item is not None:
                    line, written = item
                    sys.stdout.write(line)
                    if written is not None:
                        told.append(written)
                    item = self._lines.get_nowait()
            sys.stdout.flush()
            for written in told:
                written.set()
            if item is None:
                return

    async def next_command(self) -> dict[str, Any] | None:
        """The next command from the parent; None once stdin is closed."""
        return await self._commands.get()


Driver = Callable[[argparse.Namespace, ReplicaIO], Awaitable[None]]


def load_driver(mode: str, through: str) -> Driver:
    """The `mode` coroutine function of the driver module registered as `through`."""
    if through not in DRIVERS:
        raise SystemExit(f"unknown driver {through!r}; known: {', '.join(sorted(DRIVERS))}")
    module = importlib.import_module(DRIVERS[through])
    driver = getattr(module, mode, None)
    if driver is None:
        raise SystemExit(f"driver {through!r} has no {mode!r} mode")
    return driver  # type: ignore[no-any-return]
