"""Missed runs: whether each job runs when it should, and which ticks to record as `Missed`.

What "missed" means, per bucket:

- **once-per-tick**: tick T is missed when nobody claimed it by `T + startingDeadline`: no
  JobRun for T (other than a `Missed` one) and the job Lease's tick annotation (the claim
  high-water mark) is below T. It is judged `JUDGE_GRACE` after the deadline, so a claim made
  just before the deadline has time to reach the operator's watch. Each missed tick not yet
  recorded gets a `Missed` JobRun, a Warning Event and a count; `OnSchedule` is False while
  the latest due tick is missed and True again once a later tick is claimed. Ticks before the
  job was created, resumed or changed are not expected. After a restart the operator looks at
  the latest due tick only (older ticks it cannot tell apart from ones it pruned).
- **single-owner**: there are no ticks; the job is missed when no replica has held its Lease
  for longer than `startingDeadline`. One Event and one count per such gap, no JobRun (a
  single-owner JobRun records an ownership term, and a gap is not one).
- **every-replica**: not tracked. Its runs are not recorded (DESIGN §4), so there is nothing
  to compare the schedule with; metrics on the replicas show them.

Suspended jobs are never missed. Pure functions: no I/O, no clock of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from leasecron.models.decisions import grant_live
from leasecron.models.durations import format_duration
from leasecron.models.names import format_tick, jobrun_name
from leasecron.operator import _conditions as c
from leasecron.operator._facts import EVERY_REPLICA, SINGLE_OWNER, JobFacts
from leasecron.operator._observed import MISSED, RunView, Snapshot
from leasecron.operator._ticks import TickWindow, advance, ticks_after

JUDGE_GRACE = timedelta(seconds=1)
WINDOW_LIMIT = 10
"""At most this many due ticks are examined (and recorded) per job and pass."""


@dataclass(frozen=True, kw_only=True)
class Memory:
    """What the operator remembers about a job between passes (lost on restart, rebuilt
    from status). `since`: ticks before it are not expected. `checked_through`: the newest
    tick already judged. `unheld_since`: local monotonic time a single-owner job was first
    seen without an owner. `generation`/`suspend`: the spec last seen."""

    since: datetime
    checked_through: datetime | None = None
    unheld_since: float | None = None
    generation: int = 0
    suspend: bool = False
    current: TickWindow | None = None
    """Ticks around now: `following` is the next tick."""
    judged: TickWindow | None = None
    """Ticks around now - startingDeadline - grace: `latest` is the due tick."""


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """The OnSchedule condition, what to record, and the memory for the next pass."""

    condition: c.Condition
    due: datetime | None
    new_missed: tuple[datetime, ...]
    gap_alarm: bool
    memory: Memory


def initial_memory(
    facts: JobFacts,
    *,
    previous: dict[str, c.Condition],
    now: datetime,
    now_mono: float,
    observed_generation: object,
) -> Memory:
    """Memory for a job first seen by this process, rebuilt from its status: a spec changed
    since the status was written, or a job the status shows as suspended, expects ticks from
    now on; a single-owner job already alarmed as missed stays alarmed."""
    since = facts.ref.created
    on_schedule = previous.get(c.ON_SCHEDULE)
    if observed_generation != facts.ref.generation or (
        on_schedule is not None and on_schedule.reason == c.REASON_SUSPENDED
    ):
        since = max(since, now)
    unheld_since = None
    if on_schedule is not None and on_schedule.reason == c.REASON_MISSED_RUN:
        unheld_since = now_mono - (facts.starting_deadline + JUDGE_GRACE).total_seconds()
    return Memory(
        since=since,
        unheld_since=unheld_since,
        generation=facts.ref.generation,
        suspend=facts.suspend,
    )


def _followed(memory: Memory, facts: JobFacts, now: datetime) -> Memory:
    """Memory updated for a spec change or a resume seen since the last pass."""
    changed = memory.generation != facts.ref.generation
    resumed = memory.suspend and not facts.suspend
    if changed or resumed:
        memory = replace(memory, since=max(memory.since, now), checked_through=None)
    memory = replace(memory, generation=facts.ref.generation, suspend=facts.suspend)
    if facts.schedule is not None:
        # Only every-replica jobs show the latest tick of the schedule (lastScheduleTime); the
        # others need just the next one, so their window starts where it was first computed.
        anchor = memory.since
        if facts.bucket != EVERY_REPLICA:
            anchor = memory.current.since if memory.current is not None else now
        current = advance(facts.schedule, now, since=anchor, previous=memory.current)
        memory = replace(memory, current=current)
    return memory


def _condition(facts: JobFacts, status: str, reason: str, message: str) -> c.Condition:
    return c.Condition(
        type=c.ON_SCHEDULE,
        status=status,
        reason=reason,
        message=message,
        observed_generation=facts.ref.generation,
    )


def expect(
    facts: JobFacts, snapshot: Snapshot, memory: Memory, previous: dict[str, c.Condition]
) -> Expectation:
    """Judge the job's schedule against what replicas did."""
    memory = _followed(memory, facts, snapshot.now)
    if facts.suspend:
        return Expectation(
            condition=_condition(facts, c.TRUE, c.REASON_SUSPENDED, "The job is suspended."),
            due=None,
            new_missed=(),
            gap_alarm=False,
            memory=replace(memory, unheld_since=None),
        )
    if facts.bucket == EVERY_REPLICA:
        message = "Runs of every-replica jobs are not recorded, so missed runs are not tracked."
        return Expectation(
            condition=_condition(facts, c.TRUE, c.REASON_NOT_TRACKED, message),
            due=None,
            new_missed=(),
            gap_alarm=False,
            memory=memory,
        )
    if facts.bucket == SINGLE_OWNER:
        return _expect_owner(facts, snapshot, memory, previous)
    return _expect_ticks(facts, snapshot, memory)


def _expect_owner(
    facts: JobFacts, snapshot: Snapshot, memory: Memory, previous: dict[str, c.Condition]
) -> Expectation:
    if grant_live(snapshot.grant, now_mono=snapshot.now_mono, fallback_s=facts.grant_fallback_s):
        assert snapshot.grant is not None
        holder = snapshot.grant.record.holder
        return Expectation(
            condition=_condition(facts, c.TRUE, c.REASON_OWNED, f"Replica {holder} owns the job."),
            due=None,
            new_missed=(),
            gap_alarm=False,
            memory=replace(memory, unheld_since=None),
        )
    unheld_since = memory.unheld_since if memory.unheld_since is not None else snapshot.now_mono
    memory = replace(memory, unheld_since=unheld_since)
    unheld_for = snapshot.now_mono - unheld_since
    deadline = facts.starting_deadline
    if unheld_for < (deadline + JUDGE_GRACE).total_seconds():
        message = (
            f"No replica owns the job at the moment; one is expected within "
            f"startingDeadline {format_duration(deadline)}."
        )
        return Expectation(
            condition=_condition(facts, c.TRUE, c.REASON_AWAITING_OWNER, message),
            due=None,
            new_missed=(),
            gap_alarm=False,
            memory=memory,
        )
    before = previous.get(c.ON_SCHEDULE)
    already = before is not None and before.status == c.FALSE
    already = already and before is not None and before.reason == c.REASON_MISSED_RUN
    message = (
        f"No replica of group {facts.group} has owned the job for {unheld_for:.0f}s, longer "
        f"than startingDeadline {format_duration(deadline)}."
    )
    return Expectation(
        condition=_condition(facts, c.FALSE, c.REASON_MISSED_RUN, message),
        due=None,
        new_missed=(),
        gap_alarm=not already,
        memory=memory,
    )


def _claimed(
    facts: JobFacts,
    snapshot: Snapshot,
    runs: dict[str, RunView],
    tick: datetime,
    *,
    missed_ok: bool,
) -> bool:
    """True when tick has a JobRun (a `Missed` one only counts when `missed_ok`) or the job
    Lease's high-water mark reached it."""
    run = runs.get(jobrun_name(facts.ref.name, tick))
    if run is not None and (missed_ok or run.outcome != MISSED):
        return True
    lease = snapshot.job_lease
    return lease is not None and lease.record.tick is not None and lease.record.tick >= tick


def _expect_ticks(facts: JobFacts, snapshot: Snapshot, memory: Memory) -> Expectation:
    assert facts.schedule is not None
    judged_at = snapshot.now - facts.starting_deadline - JUDGE_GRACE
    judged = advance(facts.schedule, judged_at, since=memory.since, previous=memory.judged)
    memory = replace(memory, judged=judged)
    due = judged.latest
    if due is None:
        message = "No tick has been due since the job was created, changed or resumed."
        return Expectation(
            condition=_condition(facts, c.TRUE, c.REASON_NO_TICK_DUE, message),
            due=None,
            new_missed=(),
            gap_alarm=False,
            memory=memory,
        )
    if memory.checked_through is None:
        window = [due]
    else:
        window = ticks_after(facts.schedule, memory.checked_through, due, limit=WINDOW_LIMIT)
    runs = {run.name: run for run in snapshot.runs}
    new_missed = tuple(
        tick
        for tick in window
        if tick >= memory.since and not _claimed(facts, snapshot, runs, tick, missed_ok=True)
    )
    memory = replace(memory, checked_through=due)
    deadline = format_duration(facts.starting_deadline)
    if _claimed(facts, snapshot, runs, due, missed_ok=False):
        message = f"Tick {format_tick(due)} started within startingDeadline {deadline}."
        condition = _condition(facts, c.TRUE, c.REASON_ON_SCHEDULE, message)
    else:
        message = (
            f"Tick {format_tick(due)} was not started within startingDeadline {deadline}: "
            f"no replica of group {facts.group} claimed it."
        )
        condition = _condition(facts, c.FALSE, c.REASON_MISSED_RUN, message)
    return Expectation(
        condition=condition, due=due, new_missed=new_missed, gap_alarm=False, memory=memory
    )
