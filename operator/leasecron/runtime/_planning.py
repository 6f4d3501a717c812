"""Pure tick planning for one job (docs/design.md §5.6): which tick to wait for next, which
ticks to run and which to record as `Missed` once a claim is held, and the per-tick jitter.

No I/O and no clock of its own: `now` is passed in, so unit tests drive it with a FakeClock.
It does not claim anything: the claim (with the Lease's recorded tick as the high-water mark)
is what makes these plans safe to compute on every replica at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from leasecron.models.names import format_tick
from leasecron.models.schedules import Schedule
from leasecron.models.specs import CatchUpPolicy
from leasecron.models.vocabulary import SkipReason

MISSED_RECORD_LIMIT = 10
"""At most this many `Missed` JobRuns are written for one claim (the newest ticks); older
missed ticks are only logged and counted."""
_EPSILON = timedelta(microseconds=1)


@dataclass(frozen=True)
class NextTick:
    """The tick to act on next. `catch_up` is True when the tick is already past its starting
    deadline and is run only because the job's catchUp policy says so."""

    tick: datetime
    catch_up: bool = False


@dataclass(frozen=True)
class TickPlan:
    """What the holder of the claim for `claimed` does: run `run` in order (the claimed tick
    last) and record `missed` as Missed. `more_missed` counts missed ticks too old to record."""

    claimed: datetime
    run: tuple[datetime, ...]
    missed: tuple[datetime, ...]
    more_missed: bool = False

    def without(self, ran: Collection[datetime]) -> TickPlan:
        """The plan less the ticks in `ran` (already run elsewhere, e.g. unguarded during an
        outage): they are neither run again nor recorded as Missed. The claimed tick stays."""
        if not ran:
            return self
        return TickPlan(
            claimed=self.claimed,
            run=tuple(t for t in self.run if t == self.claimed or t not in ran),
            missed=tuple(t for t in self.missed if t not in ran),
            more_missed=self.more_missed,
        )


def due_order(
    plan: TickPlan, *, late: bool, waited: bool, catch_up: bool
) -> tuple[TickPlan, tuple[datetime, ...], SkipReason | None]:
    """A claimed instant's plan (`plan_claimed`) as it starts, the ticks to record Missed
    because the job's earlier run still goes, and why the instant itself does not start.
    `waited`: the instant could not start beside that run, nor could the catch-up runs that
    would follow it (`overlap`). An instant `late` past its startingDeadline (not a
    `catch_up` tick itself) is missed, its catch-up runs still run (`deadline`). Otherwise
    the on-time tick runs first (it has a deadline to keep), then the catch-up runs; a
    catch-up instant runs in its plan's order."""
    instant = plan.claimed
    older = tuple(t for t in plan.run if t != instant)
    if waited:
        return replace(plan, run=()), (*older, instant), SkipReason.OVERLAP
    if late and not catch_up:
        return replace(plan, run=older, missed=(*plan.missed, instant)), (), SkipReason.DEADLINE
    if not catch_up:
        return replace(plan, run=(instant, *older)), (), None
    return plan, (), None


def next_tick(
    schedule: Schedule,
    *,
    now: datetime,
    after: datetime,
    starting_deadline: timedelta | None,
    catch_up: CatchUpPolicy,
) -> NextTick:
    """The tick to dispatch or wait for, given the last tick this replica handled (`after`,
    or the job's creation time before the first one).

    The first tick after `after` when it is still ahead. Otherwise this replica fell behind
    (it started, or came back from an outage): the latest tick at or before `now` if it can
    still start (step 8), or as a catch-up run when the policy is Latest or All (step 7);
    else the next tick after `now`, and the ticks in between are missed.
    """
    upcoming = schedule.next_after(after)
    if upcoming > now:
        return NextTick(upcoming)
    latest = schedule.latest_at_or_before(now)
    if latest is None or latest <= after:
        return NextTick(schedule.next_after(now))
    if starting_deadline is None or now <= latest + starting_deadline:
        return NextTick(latest)
    if catch_up in (CatchUpPolicy.LATEST, CatchUpPolicy.ALL):
        return NextTick(latest, catch_up=True)
    return NextTick(schedule.next_after(now))


def plan_claimed(
    schedule: Schedule,
    *,
    claimed: datetime,
    previous: datetime | None,
    not_before: datetime | None,
    catch_up: CatchUpPolicy,
    max_ticks: int,
    record_limit: int = MISSED_RECORD_LIMIT,
    previous_ran: bool = True,
) -> TickPlan:
    """Step 7: with the claim for `claimed` held and `previous` the tick the Lease recorded
    before it (the high-water mark; None for a first claim), decide what runs and what is
    recorded as Missed. Ticks at or before `not_before` (the job's creation, or its last
    resume) are never missed: the job did not exist or was suspended then.

    None and Latest run only `claimed`; All first runs the newest `max_ticks` missed ticks in
    order. Every other tick in between is missed. `previous_ran=False` says the recorded
    tick was claimed but never run (a claim of this replica whose reply was lost): it then
    counts among the missed ticks itself.
    """
    if previous is not None and not previous_ran:
        previous -= _EPSILON
    bounds = [moment for moment in (previous, not_before) if moment is not None]
    lower = max(bounds) if bounds else None
    if lower is None or lower >= claimed or schedule.next_after(lower) >= claimed:
        return TickPlan(claimed=claimed, run=(claimed,), missed=())
    catching = max(0, max_ticks) if catch_up is CatchUpPolicy.ALL else 0
    window = catching + max(0, record_limit)
    between = schedule.ticks_between(lower, claimed - _EPSILON, limit=window + 1, newest=True)
    more = len(between) > window
    between = between[-window:] if window else []
    ran = between[len(between) - catching :] if catching else []
    missed = between[: len(between) - len(ran)]
    return TickPlan(claimed=claimed, run=(*ran, claimed), missed=tuple(missed), more_missed=more)


def plan_overtaken(
    schedule: Schedule,
    *,
    instant: datetime,
    previous: datetime | None,
    not_before: datetime | None,
    now: datetime,
    starting_deadline: timedelta,
    catch_up: CatchUpPolicy,
    max_ticks: int,
    record_limit: int = MISSED_RECORD_LIMIT,
    previous_ran: bool = True,
) -> TickPlan | None:
    """For a job NOT due at `instant`, when a claim of `instant` replaced the shard's
    high-water mark `previous`: the job's ticks in between were claimed by nobody and never
    can be now (the mark only grows), so the claimant owns them. A tick that can still start
    (within its startingDeadline) runs; older ones run as catch-up per the job's policy
    (Latest: the newest; All: the newest `max_ticks`), the rest are recorded Missed. None when
    the job has no tick in between. `claimed` of the plan is its newest tick."""
    if previous is not None and not previous_ran:
        previous -= _EPSILON
    bounds = [moment for moment in (previous, not_before) if moment is not None]
    if not bounds:
        return None
    lower = max(bounds)
    if lower >= instant or schedule.next_after(lower) >= instant:
        return None  # the usual case, in one tick computation
    catching = {CatchUpPolicy.ALL: max(0, max_ticks), CatchUpPolicy.LATEST: 1}.get(catch_up, 0)
    window = catching + max(0, record_limit)
    between = schedule.ticks_between(lower, instant - _EPSILON, limit=window + 1, newest=True)
    if not between:
        return None
    more = len(between) > window
    between = between[-window:]
    fresh = [t for t in between if now <= t + starting_deadline]
    stale = [t for t in between if now > t + starting_deadline]
    caught = stale[len(stale) - catching :] if catching else []
    missed = stale[: len(stale) - len(caught)]
    run = (*caught, *fresh)
    newest = between[-1]
    return TickPlan(claimed=newest, run=run, missed=tuple(missed), more_missed=more)


def jitter_delay(job: str, tick: datetime, jitter: timedelta) -> float:
    """Seconds to wait after `tick` before acting on it: spread over [0, jitter), the same on
    every replica for one job and tick, so the ranking of replicas is kept."""
    span = jitter.total_seconds()
    if span <= 0:
        return 0.0
    digest = hashlib.sha256(f"{job}\x00{format_tick(tick)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return fraction * span
