"""The chaos soak's figures, from what the fenced ledger recorded, the JobRuns and job statuses
the operator left, and the driver's timeline. Pure functions: no I/O.

Definitions (per once-per-tick job, over the ticks due inside the measured window):

- a **run** is a handler attempt that reached the ledger (accepted or refused);
- a tick **run more than once** had two or more attempts; it was **refused by the fence** when
  at most one of them was accepted;
- a **duplicate effect** is every accepted effect of a tick beyond its first (target 0);
  `duplicate_effects_without_fencing` counts every attempt beyond the first instead: what the
  same run would have written had the store not checked the token;
- a tick **never run** has no accepted effect. For each the JobRuns say whether it was alarmed:
  `Missed` (the operator's MissedRun), or recorded with a failed outcome (`Abandoned`,
  `LostLock`, `Failed`: the run started and its replica died, stalled or was refused), or
  **silent** (nothing, or `Succeeded` without an effect; target 0). A silent tick is also
  marked `claimed_unrun` when a fencing token between its neighbours' left no effect: its
  claim landed and nothing ran under it (the failure of tests/integration/
  test_chaos_regressions.py);
- **takeover** after a fault: from its start to the first accepted effect of a job after it
  and before the next fault (once-per-tick: any tick; single-owner: a new term, so only
  faults that moved the single-owner count), the longest per fault kind.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from leasecron.bench._chaos_faults import FaultRecord
from leasecron.bench._chaos_ledger import Effect
from leasecron.models.names import format_tick

MISSED = "Missed"
FAILED_OUTCOMES = frozenset({"Abandoned", "LostLock", "Failed"})


def due_ticks(*, start: float, end: float, every: float) -> list[str]:
    """The epoch-anchored ticks of `@every <every>s` in [start, end], formatted."""
    first = int(-(-start // every))
    last = int(end // every)
    return [format_tick(datetime.fromtimestamp(k * every, UTC)) for k in range(first, last + 1)]


def outcomes_by_tick(jobruns: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(job, tick) -> the outcomes of its JobRuns."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in jobruns:
        spec, status = run.get("spec") or {}, run.get("status") or {}
        tick = spec.get("tick")
        if tick:
            found[(str(spec.get("job")), str(tick))].append(str(status.get("outcome") or ""))
    return found


def missed_by_operator(jobruns: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(job, tick) of the Missed JobRuns the operator wrote (no holder; a replica's catch-up
    writes its own identity)."""
    return {
        (str(spec.get("job")), str(spec.get("tick")))
        for run in jobruns
        if (spec := run.get("spec") or {}).get("tick")
        and (run.get("status") or {}).get("outcome") == MISSED
        and not spec.get("holder")
    }


def tick_figures(
    *,
    jobs: Sequence[str],
    due: Sequence[str],
    effects: Sequence[Effect],
    outcomes: Mapping[tuple[str, str], list[str]],
    by_operator: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset(),
) -> dict[str, Any]:
    """The per-tick figures over `jobs` x `due` (see the module docstring)."""
    attempts: Counter[tuple[str, str]] = Counter()
    accepted: Counter[tuple[str, str]] = Counter()
    for effect in effects:
        if effect.kind == "invoice":
            attempts[(effect.job, effect.tick)] += 1
            accepted[(effect.job, effect.tick)] += effect.accepted
    wanted = [(job, tick) for job in jobs for tick in due]
    more_than_once = [key for key in wanted if attempts[key] >= 2]
    never = [key for key in wanted if accepted[key] == 0]
    missed = [key for key in never if MISSED in outcomes.get(key, [])]
    failed = [
        key
        for key in never
        if key not in missed and FAILED_OUTCOMES.intersection(outcomes.get(key, []))
    ]
    silent = [key for key in never if key not in missed and key not in failed]
    return {
        "ticks_due": len(wanted),
        "runs": sum(attempts[key] for key in wanted),
        "ticks_run_more_than_once": len(more_than_once),
        "of_those_refused_by_fence": sum(1 for key in more_than_once if accepted[key] <= 1),
        "duplicate_effects": sum(max(0, accepted[key] - 1) for key in wanted),
        "duplicate_effects_without_fencing": sum(max(0, attempts[key] - 1) for key in wanted),
        "ticks_never_run": len(never),
        "never_run_alarmed_missed": len(missed),
        "of_those_missed_by_operator": sum(1 for key in missed if key in by_operator),
        "never_run_recorded_failed": len(failed),
        "never_run_silent": len(silent),
        "never_run_silent_claimed_unrun": sum(
            1 for job, tick in silent if _claimed_unrun(effects, job=job, tick=tick)
        ),
        "silent_ticks": [
            {
                "job": job,
                "tick": tick,
                "attempts": attempts[(job, tick)],
                "jobruns": outcomes.get((job, tick), []),
                "claimed_unrun": _claimed_unrun(effects, job=job, tick=tick),
            }
            for job, tick in silent
        ],
        "refused_writes": sum(1 for e in effects if e.kind == "invoice" and not e.accepted),
    }


def _claimed_unrun(effects: Sequence[Effect], *, job: str, tick: str) -> bool:
    """True when a fencing token between the effects just before and just after `tick` left
    no effect at all: a claim of the tick landed and nothing ran under it (each claim of a
    once-per-tick job takes the next token)."""
    mine = [e for e in effects if e.kind == "invoice" and e.job == job and e.token is not None]
    before = [e.token for e in mine if e.tick < tick and e.token is not None]
    after = [e.token for e in mine if e.tick > tick and e.token is not None]
    if not before or not after:
        return False
    used = {e.token for e in mine}
    return any(token not in used for token in range(max(before) + 1, min(after)))


def takeovers(
    *,
    timeline: Sequence[FaultRecord],
    effects: Sequence[Effect],
    once_per_tick: Sequence[str],
    single_owner: str,
) -> dict[str, dict[str, float | None]]:
    """Fault kind -> the longest takeover (s) of the once-per-tick jobs and the single-owner
    (None when no fault of that kind changed the single-owner's term)."""
    accepted = sorted((e for e in effects if e.accepted), key=lambda e: e.at)
    faults = sorted(
        (f for f in timeline if f.kind not in ("start", "operator_restart")), key=lambda f: f.start
    )
    longest: dict[str, dict[str, float | None]] = {}
    for index, fault in enumerate(faults):
        # A takeover is this fault's only until the next fault begins.
        horizon = faults[index + 1].start if index + 1 < len(faults) else fault.end + 30.0
        entry = longest.setdefault(fault.kind, {"once_per_tick_s": None, "single_owner_s": None})
        for job in once_per_tick:
            first = next(
                (e.at for e in accepted if e.job == job and fault.start <= e.at < horizon), None
            )
            _keep_max(entry, "once_per_tick_s", first, fault.start)
        owner_before = max(
            (e.token or 0 for e in accepted if e.job == single_owner and e.at < fault.start),
            default=0,
        )
        new_term = next(
            (
                e.at
                for e in accepted
                if e.job == single_owner
                and e.kind == "term"
                and fault.start <= e.at < horizon
                and (e.token or 0) > owner_before
            ),
            None,
        )
        _keep_max(entry, "single_owner_s", new_term, fault.start)
    return longest


def _keep_max(entry: dict[str, float | None], key: str, when: float | None, start: float) -> None:
    if when is None:
        return
    value = round(when - start, 2)
    current = entry[key]
    entry[key] = value if current is None else max(current, value)


def single_owner_figures(effects: Sequence[Effect], *, job: str) -> dict[str, int]:
    mine = [e for e in effects if e.job == job]
    return {
        "terms": sum(1 for e in mine if e.kind == "term" and e.accepted),
        "mails_taken": sum(1 for e in mine if e.kind == "mail" and e.accepted),
        "stale_writes_refused": sum(1 for e in mine if not e.accepted),
    }
