"""spec.concurrencyPolicy: what a tick of a job does while this replica's run of an earlier
tick of the same job still goes (once-per-tick: all runs of a shard stay on the replica that
holds it; every-replica: per replica).

- `Forbid` (the default): the new tick waits for the running run until its own
  startingDeadline, and is skipped (`overlap`, recorded `Missed`) if that run still goes,
  or when a newer tick waits too (only the newest starts).
- `Replace`: the running run is told to stop (`StopReason.REPLACED`: it ends `Failed`,
  "replaced by tick T"); the new tick starts once it has stopped, or after the stop grace
  (`_timeouts.stop_grace`) plus a short margin for its record, whatever it does.
- `Allow`: the new tick starts at once; both runs go, each under its own grant and token
  (the shard grant of each instant; the holder keeps every grant in use alive).

Owns the decision before a start (`make_way`) and the runs an `Allow` job left going
(`Overlapping`), which a shutdown or removal stops with the newest. It does not start runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from leasecron.models.names import format_tick
from leasecron.models.specs import ConcurrencyPolicy, ScheduledJob
from leasecron.runtime._invoke import RunControl, StopReason

Run = tuple[asyncio.Task[None], RunControl]
"""One dispatch's task and its control."""

REPLACE_MARGIN = 2.0
"""Seconds beyond the stop grace a replacing tick waits for the replaced run to end (a
handler given up on is recorded in that time)."""


def going(run: Run | None) -> bool:
    return run is not None and not run[0].done()


def replace(run: Run, *, tick: datetime, grace: float) -> None:
    """Tell `run` that tick `tick` replaces it."""
    run[1].request_stop(StopReason.REPLACED, grace=grace, note=f"by tick {format_tick(tick)}")


async def make_way(
    running: Sequence[Run], *, job: ScheduledJob, tick: datetime, grace: float, wait: float
) -> bool:
    """Before tick `tick` of `job` starts here while `running` (this replica's runs of the
    job) may still go: True when it may start now, per spec.concurrencyPolicy. Forbid waits
    up to `wait` seconds for them to end; Replace stops them (at most `grace` seconds, plus
    the margin); Allow starts at once."""
    live = [run for run in running if going(run)]
    if not live:
        return True
    policy = job.spec.concurrency_policy
    if policy is ConcurrencyPolicy.ALLOW:
        return True
    tasks = [task for task, _ in live]
    if policy is ConcurrencyPolicy.REPLACE:
        # Stopped, and waited for no longer than the new tick can wait: a run that does not
        # stop in time goes on stopping beside the tick that replaced it (never both lost).
        for run in live:
            replace(run, tick=tick, grace=grace)
        waited = min(grace + REPLACE_MARGIN, wait - _START_MARGIN)
        await asyncio.wait(tasks, timeout=max(0.0, waited))
        return True
    await asyncio.wait(tasks, timeout=max(0.0, wait))
    return all(task.done() for task in tasks)


MISSED_OVERLAP = (
    "the job's run of an earlier tick was still going (concurrencyPolicy Forbid): this tick "
    "waited for it until its startingDeadline, or until a later tick took its turn"
)
_START_MARGIN = 0.1
"""Seconds before its start-by that a replacing tick stops waiting for the run it replaces."""


class Overlapping:
    """The runs of one job still going beside its newest (concurrencyPolicy: Allow), and the
    newest of its ticks waiting for them (`queue` / `turn`): when several ticks wait for one
    long run (Forbid) or for a replaced run to end, only the newest of them starts."""

    def __init__(self) -> None:
        self._runs: list[Run] = []
        self._waiting: datetime | None = None

    def queue(self, tick: datetime) -> None:
        """Tick `tick` waits for the job's runs before it starts."""
        if self._waiting is None or tick > self._waiting:
            self._waiting = tick

    def turn(self, tick: datetime) -> bool:
        """After its wait: whether `tick` may start (no newer tick of the job waits)."""
        if self._waiting is not None and self._waiting > tick:
            return False
        self._waiting = None
        return True

    def keep(self, run: Run | None) -> None:
        """`run` is no longer the newest: keep it until it ends."""
        self._runs = [r for r in self._runs if going(r)]
        if run is not None and going(run):
            self._runs.append(run)

    def runs(self) -> list[Run]:
        """The ones still going."""
        self._runs = [r for r in self._runs if going(r)]
        return list(self._runs)


async def stop_run(
    running: tuple[asyncio.Task[None], RunControl] | None, *, reason: StopReason, grace: float
) -> None:
    """Stop one dispatch's run: at shutdown it may first finish within 80 % of the grace
    period; then it is asked to stop (the rest of the grace period) and finally cancelled."""
    if running is None or running[0].done():
        return
    task, control = running
    if reason is StopReason.STOPPING:
        await asyncio.wait([task], timeout=grace * 0.8)
        grace *= 0.2
    control.request_stop(reason, grace=grace)
    await asyncio.wait([task], timeout=grace + 5.0)
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
