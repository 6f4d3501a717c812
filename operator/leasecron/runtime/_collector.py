"""Short garbage-collector pauses in a process holding many jobs (`GcTuner`).

A Scheduler with thousands of ScheduledJobs keeps millions of long-lived objects (the jobs'
specs, the watch caches, their metrics), and CPython's full collection scans every one of
them, on the event loop, whenever enough new objects have survived: the run starts of a large
instant make it happen, and with 10,000 jobs a pause lasted up to 1.5 s (2.5 s on a loaded
machine), during which no claim went out, no grant was renewed and no run started
(docs/benchmarks.md, "Garbage-collector pauses"). `gc.freeze()` moves every object tracked at
that moment to the permanent generation, which collections skip; the Scheduler freezes once
its jobs are taken up and again each time their number has grown by a quarter (and by at
least `_STEP`), so the long-lived part of the heap stays out of the scans and what a
collection scans grows with the runs going on, not with the jobs.

Each run start makes a few hundred container objects that live as long as the run, so an
instant of thousands of runs also makes the young generations fill and be scanned over and
over (with CPython's default thresholds, 700 / 10 / 10, the collector took half of a
replica's CPU on that instant). While a Scheduler runs, the thresholds are `THRESHOLDS`
instead (collections of the youngest generation every 20,000 new objects rather than 700,
and full ones rarely), unless the application set its own; they are put back when it stops.

The run starts of a large instant still fill the young generations: with 2000 starts a
replica, the objects of the runs going on (their tasks, contexts, queued records) piled up in
the middle generation, and its collection took 150-400 ms of the loop in the middle of the
starts (the 10,000-job benchmark; docs/benchmarks.md). So while a burst of claims and starts
goes on (`StartPacer.on_busy`) and `SETTLE_S` after it, collection is held (`hold`:
`gc.disable()`, at most `HOLD_MAX_S`), and it runs after, when what it delays are the records
written off the start path.

What it costs: a reference cycle among frozen objects that later becomes garbage is not
collected (objects freed by reference counting are freed as always; leasecron's job objects
form no cycles), and cyclic garbage waits for a collection a little longer. It is
process-wide, like the collector: `Tuning(tune_gc=False)` leaves the collector alone, for an
application that manages it itself.
"""

from __future__ import annotations

import asyncio
import gc

from leasecron._logs import get_logger

_log = get_logger("leasecron.runtime")
_STEP = 100
"""Jobs taken up since the last freeze before freezing again (and a quarter more)."""
DEFAULT_THRESHOLDS = (700, 10, 10)
"""CPython's own: an application that changed them manages the collector itself."""
THRESHOLDS = (20_000, 50, 100)
SETTLE_S = 0.5
"""How long collection stays held after a burst, in case another begins (seconds): the
shards of one instant are claimed, granted and started one after another."""
HOLD_MAX_S = 10.0
"""The longest a burst holds collection (seconds): a burst is seconds of starts at most; a
longer one must not keep cyclic garbage from being collected for good."""


class GcTuner:
    """The collector's thresholds while a Scheduler runs, and the heap frozen as the jobs it
    holds grow (see the module)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.frozen_at = 0
        """How many jobs were held at the last freeze."""
        self._replaced: tuple[int, int, int] | None = None
        self._held: asyncio.TimerHandle | None = None
        """While collection is held: the timer that ends the hold at `HOLD_MAX_S`."""
        self._settling: asyncio.TimerHandle | None = None
        """After a burst: the timer that ends the hold `SETTLE_S` later."""

    def start(self) -> None:
        """Raise the thresholds, unless turned off or the application set its own."""
        if self.enabled and gc.get_threshold() == DEFAULT_THRESHOLDS:
            self._replaced = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)

    def stop(self) -> None:
        """Put back the thresholds it replaced, unless someone changed them since, and end a
        hold."""
        self._let_go()
        replaced, self._replaced = self._replaced, None
        if replaced is not None and gc.get_threshold() == THRESHOLDS:
            gc.set_threshold(*replaced)

    def jobs(self, count: int) -> bool:
        """`count` jobs are held now: freeze when they have grown enough; whether it froze."""
        if not self.enabled or count < max(self.frozen_at + _STEP, self.frozen_at * 5 // 4):
            return False
        gc.freeze()
        self.frozen_at = count
        _log.debug("heap frozen out of full collections", jobs=count, frozen=gc.get_freeze_count())
        return True

    def hold(self, busy: bool) -> None:
        """Hold collection while `busy` (a burst of claims and starts: `StartPacer.on_busy`)
        and `SETTLE_S` after it (a large instant's shards become busy one after another), for
        at most `HOLD_MAX_S` in all. Called on the event loop. Does nothing when turned off,
        or when the application disabled the collector itself."""
        loop = asyncio.get_running_loop()
        if self._settling is not None:
            self._settling.cancel()
            self._settling = None
        if busy and self._held is None and self.enabled and gc.isenabled():
            gc.disable()
            self._held = loop.call_later(HOLD_MAX_S, self._let_go)
        elif not busy and self._held is not None:
            self._settling = loop.call_later(SETTLE_S, self._let_go)

    def _let_go(self) -> None:
        for timer in (self._held, self._settling):
            if timer is not None:
                timer.cancel()
        if self._held is not None:
            gc.enable()
        self._held = self._settling = None
