"""The claim engine's jobs by shard Lease (`ShardJobs.of_shard`, `foreign_of_shard`): a
shard's jobs are found from an index kept until the names change, not by going through the
group's jobs on every claim (a large instant claims dozens of shards of thousands of jobs)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from leasecron.models.groups import GroupState, shard_ref
from leasecron.models.specs import ScheduledJob
from leasecron.runtime._invoke import StopReason
from leasecron.runtime._shard_jobs import ShardJobs

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GROUP = "g"


def job(name: str, *, handler: str | None = None) -> ScheduledJob:
    spec: dict[str, Any] = {"bucket": "once-per-tick", "schedule": "* * * * *", "group": GROUP}
    if handler is not None:
        spec["handler"] = handler
    return ScheduledJob.from_resource(
        {
            "apiVersion": "leasecron.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": spec,
        }
    )


EIGHT = GroupState(shards=8)


def table(names: list[str]) -> ShardJobs:
    jobs = ShardJobs(SimpleNamespace(group=GROUP, grace_period=1.0))  # type: ignore[arg-type]
    for name in names:
        jobs.add(job(name), created=NOW)
    return jobs


def by_shard(names: list[str], shards: int) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name in names:
        out.setdefault(shard_ref(GROUP, name, shards=shards).lease, set()).add(name)
    return out


def test_a_shards_jobs_are_those_placed_on_it_under_the_count_asked_for() -> None:
    names = [f"job-{i}" for i in range(200)]
    jobs = table(names)
    for shards in (16, 4, 16):  # a count change, and back
        expected = by_shard(names, shards)
        for lease, members in expected.items():
            ref = shard_ref(GROUP, next(iter(members)), shards=shards)
            assert {e.job.name for e in jobs.of_shard(ref, GroupState(shards=shards))} == members, (
                lease
            )


def test_the_index_follows_jobs_added_removed_and_foreign() -> None:
    async def scenario() -> None:
        names = [f"job-{i}" for i in range(50)]
        jobs = table(names)
        ref = shard_ref(GROUP, "job-0", shards=8)
        before = {e.job.name for e in jobs.of_shard(ref, EIGHT)}
        mates = sorted(by_shard([f"extra-{i}" for i in range(100)], 8)[ref.lease])
        jobs.add(job(mates[0]), created=NOW)
        await jobs.remove("job-0", StopReason.REMOVED)
        jobs.note_foreign(job(mates[1], handler="elsewhere"))
        assert {e.job.name for e in jobs.of_shard(ref, EIGHT)} == (before - {"job-0"}) | {mates[0]}
        assert [j.name for j in jobs.foreign_of_shard(ref, EIGHT)] == [mates[1]]
        jobs.forget_foreign(mates[1])
        assert jobs.foreign_of_shard(ref, EIGHT) == []

    asyncio.run(scenario())


def test_finding_each_shards_jobs_places_every_job_once_not_once_per_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"job-{i}" for i in range(500)]
    jobs = table(names)
    calls: Counter[str] = Counter()
    real = ShardJobs.placed

    def counting(self: ShardJobs, entry: Any, state: GroupState) -> Any:
        calls[entry.job.name] += 1
        return real(self, entry, state)

    monkeypatch.setattr(ShardJobs, "placed", counting)
    for _ in range(3):
        for index in range(32):
            ref = next(
                shard_ref(GROUP, n, shards=32)
                for n in names
                if shard_ref(GROUP, n, shards=32).shard == index
            )
            jobs.of_shard(ref, GroupState(shards=32))
    assert set(calls.values()) == {1}, calls.most_common(3)


def test_a_job_on_a_lease_of_its_own_is_that_leases_only_job_and_leaves_its_hashed_shard() -> None:
    names = [f"job-{i}" for i in range(50)]
    jobs = table(names)
    hashed = shard_ref(GROUP, "job-0", shards=8)
    before = {e.job.name for e in jobs.of_shard(hashed, EIGHT)}
    moved = GroupState(shards=8, own=frozenset({"job-0"}))
    assert {e.job.name for e in jobs.of_shard(hashed, moved)} == before - {"job-0"}
    own = moved.ref(GROUP, "job-0")
    assert [e.job.name for e in jobs.of_shard(own, moved)] == ["job-0"]
    assert jobs.ref_of("job-0", moved) == own
    assert jobs.ref_of("job-0", EIGHT) == hashed
