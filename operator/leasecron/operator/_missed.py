"""Missed runs: whether each job runs when it should, and which ticks to record as `Missed`.

What "missed" means, per bucket:

- **once-per-tick**: a tick counts as run only on evidence of a run: a JobRun for it (named
  `<job>-<yyyymmddhhmmss>`) with any outcome but `Missed` (Running, Succeeded, Failed,
  LostLock, Unguarded, ...). A claim alone is not a run: a claim whose write landed while its
  reply was lost leaves the Lease saying "tick T is claimed" while nobody runs T. So tick T is
  missed when it has no JobRun and
  - nobody claimed it by `T + startingDeadline`: the job's shard Lease (the group record's
    shard count places the job on one of its group's shard Leases) records no instant at or
    after T (its tick annotation, the claim high-water mark, is below T, and so is the group
    record's floor), judged `JUDGE_GRACE` after the deadline so that a claim made just before
    it has time to reach the operator's watch; or
  - it was claimed (the shard Lease's high-water mark reached T) but no JobRun for it has
    appeared by `T + startingDeadline + record_grace`. Run records may arrive late (written
    off the start path, retried); `record_grace` (the operator's `--run-record-grace`,
    default `DEFAULT_RECORD_GRACE`) is how long the operator waits for one before it alarms.
    The alarm says so: the tick was claimed on that shard Lease and no run record appeared,
    which is not the same as no replica claiming it.
  Each missed tick not yet recorded gets a `Missed` JobRun, a Warning Event and a count; a
  replica that holds the tick and records its run later takes that record over. `OnSchedule`
  is False while the latest due tick is missed and True again once a later tick has run; while
  the latest due tick awaits its record it keeps what it said. Ticks before the job was
  created, resumed or changed are not expected. After a restart the operator judges the latest
  due tick, and the claimed ticks of the last `startingDeadline + JUDGE_GRACE + record_grace`
  (at most `WINDOW_LIMIT`) that have no JobRun: JobRuns are never pruned that early (see
  `_history`), so a tick run before the restart is never taken for a missed one.
- **single-owner**: there are no ticks; the job is missed when no replica has held its Lease
  for longer than `startingDeadline`. One Event and one count per such gap, no JobRun (a
  single-owner JobRun records an ownership term, and a gap is not one).
- **every-replica**: not tracked. Its runs are not recorded (docs/design.md §4), so there is nothing
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
DEFAULT_RECORD_GRACE = timedelta(seconds=30)
"""How long after `T + startingDeadline` a claimed tick may wait for its JobRun."""
_EPSILON = timedelta(microseconds=1)

# What is known of one due tick.
RAN = "ran"  # a JobRun other than Missed
RECORDED_MISSED = "recorded-missed"  # a Missed JobRun
UNCLAIMED = "unclaimed"  # no JobRun, no claim: missed
UNRUN_CLAIM = "unrun-claim"  # claimed, no JobRun by the record grace: missed
PENDING = "pending"  # claimed, no JobRun yet, within the record grace


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
    pending: tuple[datetime, ...] = ()
    """Due ticks that were (or may have been) claimed and await their JobRun."""


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """The OnSchedule condition, what to record, and the memory for the next pass."""

    condition: c.Condition
    due: datetime | None
    new_missed: tuple[datetime, ...]
    gap_alarm: bool
    memory: Memory
    unrun_claims: frozenset[datetime] = frozenset()
    """The ticks of `new_missed` that were claimed but never run."""
    record_grace: timedelta = DEFAULT_RECORD_GRACE
    recorded_elsewhere: tuple[datetime, ...] = ()
    """Missed ticks a replica already recorded (its catch-up, or a claim whose grant ended
    before the tick started): no record to write, but the same alarm (Event and count)."""
    shard_lease: str | None = None
    """The shard Lease the job's ticks are claimed on (named in the messages)."""


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
    facts: JobFacts,
    snapshot: Snapshot,
    memory: Memory,
    previous: dict[str, c.Condition],
    *,
    record_grace: timedelta = DEFAULT_RECORD_GRACE,
) -> Expectation:
    """Judge the job's schedule against what replicas did; a claimed tick may wait
    `record_grace` past its starting deadline for its JobRun."""
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
    return _expect_ticks(facts, snapshot, memory, previous, record_grace=record_grace)


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


def missed_message(
    facts: JobFacts,
    tick: datetime,
    *,
    claimed: bool,
    grace: timedelta,
    shard_lease: str | None = None,
) -> str:
    """Why `tick` is missed, in the words of the condition, the Event and the JobRun: claimed
    on the shard Lease but never recorded, or never claimed at all."""
    deadline = format_duration(facts.starting_deadline)
    on = f" on shard Lease {shard_lease}" if shard_lease else ""
    if claimed:
        return (
            f"Tick {format_tick(tick)} was claimed{on} but no run record appeared within "
            f"startingDeadline {deadline} and the run-record grace {format_duration(grace)}: "
            f"the replica that claimed it did not run it, or did not record the run."
        )
    return (
        f"Tick {format_tick(tick)} was not started within startingDeadline {deadline}: "
        f"no replica of group {facts.group} claimed it{on}."
    )


def verdict(
    facts: JobFacts,
    snapshot: Snapshot,
    runs: dict[str, RunView],
    tick: datetime,
    *,
    record_grace: timedelta,
) -> str:
    """What is known of due tick `tick`: RAN, RECORDED_MISSED, UNCLAIMED, PENDING or
    UNRUN_CLAIM."""
    run = runs.get(jobrun_name(facts.ref.name, tick))
    if run is not None and run.pending:
        return PENDING  # a requested run of the tick: awaited, it is no evidence of a run yet
    if run is not None:
        return RECORDED_MISSED if run.outcome == MISSED else RAN
    if not snapshot.claimed(tick):
        return UNCLAIMED
    if snapshot.now < tick + facts.starting_deadline + record_grace:
        return PENDING
    return UNRUN_CLAIM


def _window(facts: JobFacts, memory: Memory, due: datetime, *, horizon: datetime) -> list[datetime]:
    """The due ticks to judge in this pass: those since the last pass, or (first pass) those
    of the horizon, plus the pending ones; at most WINDOW_LIMIT new ones, the newest."""
    assert facts.schedule is not None
    after = memory.checked_through
    if after is None:
        after = max(horizon, memory.since) - _EPSILON
    fresh = ticks_after(facts.schedule, after, due, limit=WINDOW_LIMIT) if after < due else []
    ticks = {tick for tick in (*memory.pending, *fresh) if tick >= memory.since}
    return sorted(ticks)


def _tick_condition(
    facts: JobFacts,
    due: datetime,
    seen: str,
    *,
    runs: dict[str, RunView],
    previous: dict[str, c.Condition],
    grace: timedelta,
    shard_lease: str | None,
) -> c.Condition:
    deadline = format_duration(facts.starting_deadline)
    if seen == RAN:
        message = f"Tick {format_tick(due)} started within startingDeadline {deadline}."
        return _condition(facts, c.TRUE, c.REASON_ON_SCHEDULE, message)
    if seen == PENDING:
        before = previous.get(c.ON_SCHEDULE)
        if before is not None and before.reason in (c.REASON_ON_SCHEDULE, c.REASON_MISSED_RUN):
            return replace(before, observed_generation=facts.ref.generation)
        on = f" on shard Lease {shard_lease}" if shard_lease else ""
        message = (
            f"Tick {format_tick(due)} was claimed{on}; its run record is awaited until "
            f"startingDeadline {deadline} and the run-record grace {format_duration(grace)} "
            f"have passed."
        )
        return _condition(facts, c.TRUE, c.REASON_AWAITING_RUN_RECORD, message)
    if seen == RECORDED_MISSED:
        run = runs[jobrun_name(facts.ref.name, due)]
        message = run.message or missed_message(
            facts, due, claimed=False, grace=grace, shard_lease=shard_lease
        )
    else:
        message = missed_message(
            facts, due, claimed=seen == UNRUN_CLAIM, grace=grace, shard_lease=shard_lease
        )
    return _condition(facts, c.FALSE, c.REASON_MISSED_RUN, message)


def _expect_ticks(
    facts: JobFacts,
    snapshot: Snapshot,
    memory: Memory,
    previous: dict[str, c.Condition],
    *,
    record_grace: timedelta,
) -> Expectation:
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
            record_grace=record_grace,
        )
    runs = {run.name: run for run in snapshot.runs}
    horizon = judged_at - record_grace
    seen = {
        tick: verdict(facts, snapshot, runs, tick, record_grace=record_grace)
        for tick in _window(facts, memory, due, horizon=horizon)
    }
    if memory.checked_through is None:  # first pass: only claims are looked for before `due`
        seen = {t: v for t, v in seen.items() if t == due or v not in (UNCLAIMED, RAN)}
    due_seen = seen.get(due) or verdict(facts, snapshot, runs, due, record_grace=record_grace)
    new_missed = tuple(tick for tick, v in sorted(seen.items()) if v in (UNCLAIMED, UNRUN_CLAIM))
    # A Missed record a replica wrote (the operator's have no holder) is alarmed once, when its
    # tick is first judged; after a restart or failover only ticks judged from now on count.
    first_pass = memory.checked_through is None
    recorded_elsewhere = tuple(
        tick
        for tick, v in sorted(seen.items())
        if v == RECORDED_MISSED
        and not first_pass
        and runs[jobrun_name(facts.ref.name, tick)].holder
    )
    pending = tuple(tick for tick, v in sorted(seen.items()) if v == PENDING)
    memory = replace(memory, checked_through=due, pending=pending)
    condition = _tick_condition(
        facts,
        due,
        due_seen,
        runs=runs,
        previous=previous,
        grace=record_grace,
        shard_lease=snapshot.shard_lease,
    )
    return Expectation(
        condition=condition,
        due=due,
        new_missed=new_missed,
        gap_alarm=False,
        memory=memory,
        unrun_claims=frozenset(t for t in new_missed if seen[t] == UNRUN_CLAIM),
        record_grace=record_grace,
        recorded_elsewhere=recorded_elsewhere,
        shard_lease=snapshot.shard_lease,
    )
