"""What the operator has observed of the world around one job, as plain values: the Lease
that holds its grant, the JobRuns it owns and the member Leases of its group.

Owns `RunView` (one JobRun), `Member` (one replica's member Lease), `Snapshot` (everything the
status logic reads for one job at one instant) and the liveness rules, judged like every
leasecron replica judges them: a Lease is live while it has a holder and this process has seen
it unchanged for less than its `leaseDurationSeconds`, on its own monotonic clock. Remote
timestamps are never trusted for expiry.

It does not read from the API server: `_reconciler` builds these values from its caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from leasecron.coordination.members import advertised_handlers
from leasecron.models.decisions import Observation, expires_at, grant_live
from leasecron.models.handover import is_retry_request
from leasecron.models.leases import parse_lease, parse_micro_time
from leasecron.models.names import parse_tick
from leasecron.models.specs import Attempt, Outcome

RUNNING = Outcome.RUNNING.value
PENDING = Outcome.PENDING.value
SUCCEEDED = Outcome.SUCCEEDED.value
MISSED = Outcome.MISSED.value

MEMBER_FALLBACK_S = 15.0
"""The duration assumed for a member Lease that does not state a usable one."""


@dataclass(frozen=True, kw_only=True)
class RunView:
    """One JobRun. `outcome` is "" while the JobRun carries none yet; `order` sorts runs
    oldest first (tick, else start, else creation time). `trigger` is Manual or Backfill
    for a requested run (`models.requests`), "" for the schedule's."""

    name: str
    tick: datetime | None
    holder: str
    token: int | None
    start: str | None
    end: str | None
    outcome: str
    message: str
    created: datetime
    resource_version: str
    trigger: str = ""
    attempts: tuple[Attempt, ...] = ()
    """status.attempts of a retried run (unreadable entries left out)."""
    retry: bool = False
    """A retry handed over (label `leasecron.dev/trigger=Retry`), Pending or taken."""

    @property
    def pending(self) -> bool:
        """A requested run nobody picked up yet: not a run (yet), and not finished."""
        return self.outcome == PENDING and not self.holder

    @property
    def order(self) -> tuple[datetime, str]:
        return (self.tick or self.created, self.name)

    @property
    def finished(self) -> bool:
        return self.outcome not in ("", RUNNING, PENDING)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _time(value: object, parse: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed: datetime = parse(value)
    except ValueError:
        return None
    return parsed


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def run_from_object(obj: Mapping[str, Any]) -> RunView:
    """A RunView of a raw JobRun. Never raises: unreadable fields become None or ""."""
    metadata, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    token = spec.get("fencingToken")
    tick = _time(spec.get("tick"), parse_tick) or _time(spec.get("tick"), parse_micro_time)
    created = _time(metadata.get("creationTimestamp"), parse_micro_time)
    return RunView(
        name=str(metadata.get("name") or ""),
        tick=tick,
        holder=_text(spec.get("holder")) or "",
        token=token if isinstance(token, int) and not isinstance(token, bool) else None,
        start=_text(spec.get("start")),
        end=_text(status.get("end")),
        outcome=_text(status.get("outcome")) or "",
        message=_text(status.get("message")) or "",
        created=created or datetime(1970, 1, 1, tzinfo=UTC),
        resource_version=str(metadata.get("resourceVersion") or ""),
        trigger=_text(spec.get("trigger")) or "",
        attempts=_attempts(status.get("attempts")),
        retry=is_retry_request(obj),
    )


def _attempts(value: object) -> tuple[Attempt, ...]:
    if not isinstance(value, list):
        return ()
    out: list[Attempt] = []
    for item in value:
        try:
            out.append(Attempt.model_validate(item, by_name=False))
        except ValueError:
            return ()  # a record that cannot be read is not one to hand over
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Member:
    """One replica's member Lease: who it is, which handlers it registered, and the local
    monotonic time at which it expires unless renewed (its holder is "" once released)."""

    lease_name: str
    holder: str
    handlers: frozenset[str]
    expires_at: float

    def live(self, now_mono: float) -> bool:
        return bool(self.holder) and now_mono < self.expires_at


def member_from_lease(obj: Mapping[str, Any], *, observed_at: float) -> Member:
    """A Member from a raw member Lease first seen (in its current version) at `observed_at`."""
    record = parse_lease(obj)
    observation = Observation(record=record, observed_at=observed_at)
    return Member(
        lease_name=record.name,
        holder=record.holder,
        handlers=advertised_handlers(obj),
        expires_at=expires_at(observation, fallback_s=MEMBER_FALLBACK_S),
    )


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Everything the status logic reads for one job at one instant.

    `job_lease` is the job's own Lease (single-owner jobs), `grant` the Lease whose holder
    runs the job: its own Lease, or for once-per-tick jobs the shard Lease named
    `shard_lease` (the group record's shard count places the job on it), whose tick
    annotation is the high-water mark of the instants claimed on it. `floor_tick` is the
    group record's floor: instants at or before it were taken on the shard Leases of an
    earlier count. `guard_grants` are the Leases of the job's `job=` guards of earlier
    versions (role `guard`, labelled with the job). `members` are the member Leases of the
    job's group in its namespace, live or not. `now` is wall time (ticks), `now_mono` the
    local monotonic clock (expiry).
    """

    job_lease: Observation | None
    grant: Observation | None
    runs: tuple[RunView, ...]
    members: tuple[Member, ...]
    now: datetime
    now_mono: float
    shard_lease: str | None = None
    floor_tick: datetime | None = None
    guard_grants: tuple[Observation, ...] = ()

    def claimed(self, tick: datetime) -> bool:
        """Whether instant `tick` is taken on the job's shard Lease: its high-water mark (or
        the group record's floor) is at or after it. A claim alone is no run."""
        marks = [self.floor_tick]
        if self.shard_lease is not None and self.grant is not None:
            marks.append(self.grant.record.tick)
        return any(mark is not None and mark >= tick for mark in marks)

    def grant_holder(self, *, fallback_s: float) -> str:
        """The holder of a live grant, "" when the Lease is free, expired or absent: the
        grant's, else a job guard's (the job's guards run it then)."""
        for grant in (self.grant, *self.guard_grants):
            if grant_live(grant, now_mono=self.now_mono, fallback_s=fallback_s):
                assert grant is not None
                return grant.record.holder
        return ""

    def live_members(self) -> list[Member]:
        return [m for m in self.members if m.live(self.now_mono)]
