"""One reconcile pass for one job, decided before anything is written: the schedule
judgement, the history work, whether the job's Lease must be created, and when the job needs
another look even if nothing changes (`recheck_at`, on the local monotonic clock).

`recheck_at` lets the reconciler skip jobs with nothing to do: it is the earliest moment at
which time alone can change this job's status (the next tick, the next starting deadline, a
grant or member Lease expiring, a single-owner gap reaching its deadline, a claimed tick's
run-record grace running out), capped at
`MAX_RECHECK_S`. Events on the job, its Lease, its JobRuns or its group's members wake it
sooner. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from leasecron.models.decisions import expires_at, grant_live
from leasecron.operator import _conditions as c
from leasecron.operator._facts import SINGLE_OWNER, JobFacts
from leasecron.operator._history import HistoryPlan, plan_history
from leasecron.operator._missed import (
    DEFAULT_RECORD_GRACE,
    JUDGE_GRACE,
    Expectation,
    Memory,
    expect,
)
from leasecron.operator._observed import Snapshot

MAX_RECHECK_S = 300.0
MIN_RECHECK_S = 0.05


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    """What one pass does for one valid job."""

    expectation: Expectation
    history: HistoryPlan
    create_lease: bool
    recheck_at: float


def _mono(snapshot: Snapshot, wall: datetime) -> float:
    return snapshot.now_mono + (wall - snapshot.now).total_seconds()


def recheck_at(
    facts: JobFacts,
    snapshot: Snapshot,
    memory: Memory,
    *,
    record_grace: timedelta = DEFAULT_RECORD_GRACE,
) -> float:
    """The earliest local monotonic time at which time alone can change the job's status."""
    now_mono = snapshot.now_mono
    moments = [now_mono + MAX_RECHECK_S]
    moments.extend(
        _mono(snapshot, tick + facts.starting_deadline + record_grace) for tick in memory.pending
    )
    if not facts.suspend and memory.current is not None:
        moments.append(_mono(snapshot, memory.current.following))
    if not facts.suspend and memory.judged is not None:
        next_due = memory.judged.following
        moments.append(_mono(snapshot, next_due + facts.starting_deadline + JUDGE_GRACE))
    grant = snapshot.grant
    if grant is not None and grant_live(
        grant, now_mono=now_mono, fallback_s=facts.grant_fallback_s
    ):
        moments.append(expires_at(grant, fallback_s=facts.grant_fallback_s))
    if facts.bucket == SINGLE_OWNER and memory.unheld_since is not None and not facts.suspend:
        deadline = (facts.starting_deadline + JUDGE_GRACE).total_seconds()
        moments.append(memory.unheld_since + deadline)
    moments.extend(m.expires_at for m in snapshot.members if m.live(now_mono))
    moments.extend(  # a request nobody picked up expires then
        _mono(snapshot, run.created + facts.starting_deadline) + 0.01
        for run in snapshot.runs
        if run.pending
    )
    future = [moment for moment in moments if moment > now_mono]
    return max(min(future, default=now_mono + MAX_RECHECK_S), now_mono + MIN_RECHECK_S)


def plan_job(
    facts: JobFacts,
    snapshot: Snapshot,
    memory: Memory,
    *,
    previous: dict[str, c.Condition],
    record_grace: timedelta = DEFAULT_RECORD_GRACE,
) -> JobPlan:
    """Decide one pass for one valid job. Runs whose tick may still be judged (within
    startingDeadline + JUDGE_GRACE + `record_grace` of now) are kept from pruning."""
    expectation = expect(facts, snapshot, memory, previous, record_grace=record_grace)
    judging_since = snapshot.now - facts.starting_deadline - JUDGE_GRACE - record_grace
    return JobPlan(
        expectation=expectation,
        history=plan_history(facts, snapshot, keep_ticks_after=judging_since),
        create_lease=facts.job_lease is not None and snapshot.job_lease is None,
        recheck_at=recheck_at(facts, snapshot, expectation.memory, record_grace=record_grace),
    )
