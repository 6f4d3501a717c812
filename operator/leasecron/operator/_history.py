"""JobRun history: which `Running` runs were abandoned by a vanished holder, and which
finished runs to delete so that a job keeps only its configured history.

- **Abandoned**: a run still `Running` whose holder no longer holds a live grant on the job's
  Lease (the grant expired without a release, or someone else holds it) *and* whose member
  Lease is gone, released or expired. Both are judged on this process's monotonic clock. A
  holder that is alive but lost its grant records `LostLock` itself, so the member check keeps
  the operator from racing it.
- **Pruning**: finished runs are kept per outcome class, newest first: `history.succeeded`
  runs with outcome `Succeeded`, and `history.failed` runs of every other finished outcome
  (`Failed`, `TimedOut`, `LostLock`, `Abandoned`, `Missed`, `Unguarded`). Runs still
  `Running` (or without an outcome yet) and requests still `Pending` are never pruned, nor
  are runs of ticks the missed-run judgement may still look at (`keep_ticks_after`: the last
  startingDeadline + grace + run-record grace), since a tick without its JobRun would be
  taken for a missed one; so a frequent job keeps a few more runs than its limits for that
  long.
- **Handed-over retries** (docs/design.md §5.16): a run that would be Abandoned whose last
  recorded attempt finished Failed/TimedOut with attempts left, still due
  (`models.handover.next_retry`), is made a retry request instead; one that stays Pending
  past its bound is finished with its last attempt's outcome.
- **Expired requests**: a requested run (`leasecron run`, `backfill`) still `Pending` after
  the job's startingDeadline from its creation was picked up by no replica; it is finished
  `Missed` (the replicas cannot: when none is there to pick it up, none is there to expire it).

Pure functions over plain values; `_reconciler` does the writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from leasecron.models.handover import Handover, next_retry
from leasecron.models.names import member_lease_name
from leasecron.operator._facts import JobFacts
from leasecron.operator._observed import PENDING, RUNNING, SUCCEEDED, RunView, Snapshot


@dataclass(frozen=True, kw_only=True)
class HistoryPlan:
    """Runs to mark `Abandoned`, runs to delete, requests to finish `Missed`, runs whose
    retry is handed over, and handed-over retries nobody took by their bound."""

    abandoned: tuple[RunView, ...]
    prune: tuple[RunView, ...]
    expired: tuple[RunView, ...] = ()
    handed_over: tuple[tuple[RunView, Handover], ...] = ()
    unclaimed: tuple[tuple[RunView, Handover], ...] = ()


def owed_retry(facts: JobFacts, run: RunView) -> Handover | None:
    """The retry a run still owes (its last attempt finished Failed/TimedOut, attempts left)."""
    return next_retry(
        attempts=run.attempts,
        retry=facts.retry,
        tick=run.tick,
        schedule=facts.schedule,
        policy=facts.concurrency_policy,
        starting_deadline=facts.starting_deadline,
    )


def holder_vanished(facts: JobFacts, snapshot: Snapshot, run: RunView) -> bool:
    """True when `run`'s holder neither holds a live grant nor keeps a live member Lease."""
    if run.holder and snapshot.grant_holder(fallback_s=facts.grant_fallback_s) == run.holder:
        return False
    member_name = member_lease_name(facts.group, run.holder) if run.holder else ""
    for member in snapshot.members:
        if member.lease_name == member_name and member.live(snapshot.now_mono):
            return False
    return True


def abandoned_runs(facts: JobFacts, snapshot: Snapshot) -> list[RunView]:
    """Running runs whose holder vanished, oldest first."""
    running = [run for run in snapshot.runs if run.outcome == RUNNING]
    return sorted(
        (run for run in running if holder_vanished(facts, snapshot, run)),
        key=lambda run: run.order,
    )


def runs_to_prune(runs: Sequence[RunView], *, succeeded: int, failed: int) -> list[RunView]:
    """Finished runs beyond the history limits, oldest first."""
    newest_first = sorted((run for run in runs if run.finished), key=lambda r: r.order)[::-1]
    wins = [run for run in newest_first if run.outcome == SUCCEEDED]
    losses = [run for run in newest_first if run.outcome != SUCCEEDED]
    extra = wins[max(succeeded, 0) :] + losses[max(failed, 0) :]
    return sorted(extra, key=lambda run: run.order)


def expired_requests(facts: JobFacts, snapshot: Snapshot) -> list[RunView]:
    """Requests nobody picked up within startingDeadline of their creation, oldest first."""
    return sorted(
        (
            run
            for run in snapshot.runs
            if run.pending and snapshot.now > run.created + facts.starting_deadline
        ),
        key=lambda run: run.order,
    )


def plan_history(
    facts: JobFacts, snapshot: Snapshot, *, keep_ticks_after: datetime | None = None
) -> HistoryPlan:
    """What to do with the job's JobRuns in this pass; runs of ticks after
    `keep_ticks_after` are kept whatever the limits say."""
    abandoned = abandoned_runs(facts, snapshot)
    prune = runs_to_prune(
        snapshot.runs, succeeded=facts.history_succeeded, failed=facts.history_failed
    )
    if keep_ticks_after is not None:
        prune = [run for run in prune if run.tick is None or run.tick <= keep_ticks_after]
    expired = expired_requests(facts, snapshot)
    handed: list[tuple[RunView, Handover]] = []
    gone: list[RunView] = []
    for run in abandoned:
        owed = owed_retry(facts, run)
        if owed is not None and snapshot.now < owed.until:
            handed.append((run, owed))
        else:
            gone.append(run)
    unclaimed = []
    for run in snapshot.runs:
        owed = owed_retry(facts, run) if run.retry and run.outcome == PENDING else None
        if owed is not None and snapshot.now >= owed.until:
            unclaimed.append((run, owed))
    return HistoryPlan(
        abandoned=tuple(gone),
        prune=tuple(prune),
        expired=tuple(expired),
        handed_over=tuple(handed),
        unclaimed=tuple(unclaimed),
    )
