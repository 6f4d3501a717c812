"""The status of one ScheduledJob (docs/design.md §3), computed from plain values.

Owns the `Valid` and `Ready` conditions, the assembly of the whole status and the comparison
that decides whether a patch is needed at all (`status_patch`). Fields:

- `holder`: the holder of a live grant on the Lease that runs the job (its own Lease for
  single-owner, its shard Lease for once-per-tick), else of a live grant on a Lease of the
  job's `job=` guards; "" when they are free or expired by the operator's own clock.
- `lastRun`: the newest JobRun (tick, holder, start, end, outcome, fencingToken).
- `lastScheduleTime`: once-per-tick, the newest claimed tick (the newest JobRun that is not
  `Missed`, or the shard Lease's high-water mark when it is one of the job's ticks);
  single-owner, the start of the newest ownership term; every-replica, the latest tick of the
  schedule (its runs are not recorded).
- `nextScheduleTime`: the next tick; absent while suspended and for single-owner jobs.
- `lastSuccessfulTime`: the end of the newest `Succeeded` run (never moves back when
  history is pruned). `missedRuns`: ticks (or single-owner gaps) the operator found missed.
- `replicas`: live members of the group that registered the job's handler.

`Ready` is True when the spec is valid and at least one live replica covers the handler.
Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from leasecron.models.names import format_tick
from leasecron.models.shards import due_at
from leasecron.operator import _conditions as c
from leasecron.operator._facts import EVERY_REPLICA, SINGLE_OWNER, Invalid, JobFacts
from leasecron.operator._observed import MISSED, SUCCEEDED, RunView, Snapshot
from leasecron.operator._ticks import TickWindow

STATUS_KEYS = (
    "observedGeneration",
    "conditions",
    "lastScheduleTime",
    "nextScheduleTime",
    "lastSuccessfulTime",
    "holder",
    "lastRun",
    "missedRuns",
    "replicas",
)


def valid_condition(facts: JobFacts) -> c.Condition:
    return c.Condition(
        type=c.VALID,
        status=c.TRUE,
        reason=c.REASON_VALID,
        message="The spec is valid.",
        observed_generation=facts.ref.generation,
    )


def coverage(facts: JobFacts, snapshot: Snapshot) -> tuple[c.Condition, int]:
    """The `Ready` condition and the number of live replicas that registered the handler."""
    live = snapshot.live_members()
    covering = [m for m in live if facts.handler in m.handlers]
    group, handler = facts.group, facts.handler
    if not live:
        status, reason = c.FALSE, c.REASON_NO_REPLICAS
        message = f"No live replica of group {group} is running, so none has handler {handler}."
    elif not covering:
        status, reason = c.FALSE, c.REASON_HANDLER_NOT_REGISTERED
        message = (
            f"No live replica of group {group} has registered handler {handler} "
            f"({len(live)} live replica{'s' if len(live) != 1 else ''} of the group)."
        )
    else:
        status, reason = c.TRUE, c.REASON_COVERED
        count = len(covering)
        message = (
            f"{count} live replica{'s' if count != 1 else ''} of group {group} "
            f"{'have' if count != 1 else 'has'} registered handler {handler}."
        )
    condition = c.Condition(
        type=c.READY,
        status=status,
        reason=reason,
        message=message,
        observed_generation=facts.ref.generation,
    )
    return condition, len(covering)


def _newest(runs: Sequence[RunView]) -> RunView | None:
    return max(runs, key=lambda run: run.order, default=None)


def last_run(runs: Sequence[RunView]) -> dict[str, Any] | None:
    """`status.lastRun` from the newest JobRun (a request nobody picked up yet is no run),
    or None without any."""
    run = _newest([run for run in runs if not run.pending])
    if run is None:
        return None
    raw: dict[str, Any] = {
        "tick": format_tick(run.tick) if run.tick else None,
        "holder": run.holder or None,
        "start": run.start,
        "end": run.end,
        "outcome": run.outcome or None,
        "fencingToken": run.token,
    }
    return {key: value for key, value in raw.items() if value is not None}


def last_schedule_time(facts: JobFacts, snapshot: Snapshot, ticks: TickWindow | None) -> str | None:
    if facts.bucket == EVERY_REPLICA:
        tick = ticks.latest if ticks is not None else None
        return format_tick(tick) if tick else None
    started = [run for run in snapshot.runs if run.outcome != MISSED and not run.pending]
    if facts.bucket == SINGLE_OWNER:
        newest = _newest(started)
        return newest.start if newest else None
    candidates = [run.tick for run in started if run.tick is not None]
    lease = snapshot.grant if snapshot.shard_lease is not None else None
    mark = lease.record.tick if lease is not None else None
    # The shard's instant counts when it was one of this job's ticks.
    schedule = facts.schedule
    if mark is not None and mark <= snapshot.now and schedule and due_at(schedule, mark):
        candidates.append(mark)
    return format_tick(max(candidates)) if candidates else None


def _last_successful(runs: Sequence[RunView], previous: object) -> str | None:
    ends = [run.end for run in runs if run.outcome == SUCCEEDED and run.end]
    if isinstance(previous, str) and previous:
        ends.append(previous)
    return max(ends, default=None)  # RFC 3339 UTC strings sort by time


def desired_status(
    *,
    facts: JobFacts,
    snapshot: Snapshot,
    previous: Mapping[str, Any],
    on_schedule: c.Condition,
    missed_runs: int,
    ticks: TickWindow | None,
) -> dict[str, Any]:
    """The whole status of a valid job (None values: fields to remove). `ticks` is the
    window around now (`Memory.current`), None for jobs without a schedule."""
    ready, replicas = coverage(facts, snapshot)
    conditions = c.merge_conditions(
        c.conditions_by_type(previous.get("conditions")),
        [valid_condition(facts), ready, on_schedule],
        now=snapshot.now,
    )
    upcoming = None
    if ticks is not None and not facts.suspend:
        upcoming = format_tick(ticks.following)
    return {
        "observedGeneration": facts.ref.generation,
        "conditions": [condition.to_dict() for condition in conditions],
        "lastScheduleTime": last_schedule_time(facts, snapshot, ticks),
        "nextScheduleTime": upcoming,
        "lastSuccessfulTime": _last_successful(snapshot.runs, previous.get("lastSuccessfulTime")),
        "holder": snapshot.grant_holder(fallback_s=facts.grant_fallback_s),
        "lastRun": last_run(snapshot.runs),
        "missedRuns": missed_runs,
        "replicas": replicas,
    }


def invalid_status(*, invalid: Invalid, previous: Mapping[str, Any], now: Any) -> dict[str, Any]:
    """The status of a job whose spec is not valid: the conditions say so; the other fields
    keep what they had, since nothing about the job can be computed."""
    generation = invalid.ref.generation
    desired = [
        c.Condition(
            type=c.VALID,
            status=c.FALSE,
            reason=invalid.reason,
            message=invalid.message,
            observed_generation=generation,
        ),
        c.Condition(
            type=c.READY,
            status=c.FALSE,
            reason=c.REASON_SPEC_NOT_VALID,
            message="The spec is not valid; see the Valid condition.",
            observed_generation=generation,
        ),
        c.Condition(
            type=c.ON_SCHEDULE,
            status=c.UNKNOWN,
            reason=c.REASON_SPEC_NOT_VALID,
            message="The spec is not valid, so no run is expected.",
            observed_generation=generation,
        ),
    ]
    conditions = c.merge_conditions(
        c.conditions_by_type(previous.get("conditions")), desired, now=now
    )
    status = {key: previous.get(key) for key in STATUS_KEYS}
    status["observedGeneration"] = generation
    status["conditions"] = [condition.to_dict() for condition in conditions]
    return status


def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch that turns `current` into `desired` for the operator's keys, or
    None when nothing changed (so no request is sent). Keys set to None are removed."""
    patch: dict[str, Any] = {}
    for key in STATUS_KEYS:
        want, have = desired.get(key), current.get(key)
        if want == have:
            continue
        if isinstance(want, dict) and isinstance(have, Mapping):
            # A merge patch merges nested objects: remove the keys `want` no longer has.
            want = {**{k: None for k in have if k not in want}, **want}
        patch[key] = want
    return patch or None
