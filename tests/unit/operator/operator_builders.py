"""Builders for the operator's unit tests: raw ScheduledJobs, Lease observations, member
Leases and JobRuns as the operator's caches hold them, on a FakeClock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from leasecron.models.clocks import FakeClock
from leasecron.models.decisions import Observation
from leasecron.models.groups import shard_ref
from leasecron.models.leases import LeaseRecord
from leasecron.models.names import jobrun_name, member_lease_name
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.operator._facts import Invalid, JobFacts, read_job
from leasecron.operator._observed import Member, RunView, Snapshot
from leasecron.operator._ticks import TickWindow, advance

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
CREATED = START - timedelta(hours=1)
SHARD_LEASE = shard_ref("billing-api", "report", shards=DEFAULT_SHARDS).lease
"""The shard Lease that claims the ticks of the default job (`report` of `billing-api`)."""


def clock() -> FakeClock:
    return FakeClock(start=START, monotonic=5000.0)


def job_object(
    name: str = "report",
    *,
    generation: int = 1,
    created: datetime = CREATED,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"bucket": "once-per-tick", "schedule": "@every 2s"}
    body.update({"startingDeadline": "3s", "group": "billing-api", "handler": "nightly_report"})
    body.update(spec)
    obj: dict[str, Any] = {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": name,
            "namespace": "billing",
            "uid": f"uid-{name}",
            "generation": generation,
            "resourceVersion": "10",
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {k: v for k, v in body.items() if v is not None},
    }
    if status is not None:
        obj["status"] = status
    return obj


def facts(**kwargs: Any) -> JobFacts:
    read = read_job(job_object(**kwargs))
    assert isinstance(read, JobFacts), read
    return read


def invalid(**kwargs: Any) -> Invalid:
    read = read_job(job_object(**kwargs))
    assert isinstance(read, Invalid), read
    return read


def lease(
    *,
    name: str = SHARD_LEASE,
    holder: str = "",
    tick: datetime | None = None,
    duration: int | None = 15,
    observed_at: float,
    transitions: int = 1,
) -> Observation:
    record = LeaseRecord(
        name=name,
        namespace="billing",
        holder=holder,
        lease_duration_s=duration,
        tick=tick,
        transitions=transitions,
    )
    return Observation(record=record, observed_at=observed_at)


def member(
    identity: str,
    *,
    handlers: tuple[str, ...] = ("nightly_report",),
    expires_at: float,
    group: str = "billing-api",
) -> Member:
    return Member(
        lease_name=member_lease_name(group, identity),
        holder=identity,
        handlers=frozenset(handlers),
        expires_at=expires_at,
    )


def run(
    tick: datetime | None,
    outcome: str,
    *,
    job: str = "report",
    holder: str = "replica-a",
    name: str | None = None,
    end: str | None = None,
    token: int | None = 1,
) -> RunView:
    stamp = tick or START
    return RunView(
        name=name or jobrun_name(job, stamp),
        tick=tick,
        holder=holder,
        token=token,
        start=stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        end=end,
        outcome=outcome,
        message="",
        created=stamp,
        resource_version="1",
    )


def window(job: JobFacts, at: FakeClock) -> TickWindow | None:
    """The tick window around `at`'s now, as the reconciler keeps it."""
    if job.schedule is None:
        return None
    return advance(job.schedule, at.now(), since=job.ref.created, previous=None)


def snapshot(
    at: FakeClock,
    *,
    job_lease: Observation | None = None,
    shard: Observation | None = None,
    grant: Observation | None = None,
    runs: tuple[RunView, ...] = (),
    members: tuple[Member, ...] = (),
    same_lease: bool = True,
    floor_tick: datetime | None = None,
) -> Snapshot:
    """A snapshot; `shard` is a once-per-tick job's shard Lease (then also its grant)."""
    if shard is not None:
        grant = shard
    elif grant is None and same_lease:
        grant = job_lease
    return Snapshot(
        job_lease=job_lease,
        grant=grant,
        runs=runs,
        members=members,
        now=at.now(),
        now_mono=at.monotonic(),
        shard_lease=shard.record.name if shard is not None else None,
        floor_tick=floor_tick,
    )
