"""Where a shard Lease created (again) starts: above the highest fencing token on record for
any job of the shard, read from the JobRuns as every other token floor is (a corrupt token
counts for nothing)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from leasecron.models.clocks import FakeClock
from leasecron.models.shards import ShardRef, shard_lease_name, shard_of
from leasecron.runtime import _shardfences
from leasecron.runtime._services import Services

SHARDS = 4


def _run(job: str, token: object) -> dict[str, Any]:
    return {"spec": {"job": job, "fencingToken": token}}


def _jobs_in(shard: int, count: int) -> list[str]:
    names = (f"job-{i}" for i in range(1000))
    return [n for n in names if shard_of(n, shards=SHARDS) == shard][:count]


def test_the_floor_of_a_shard_is_the_highest_valid_token_of_its_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours = _jobs_in(1, 3)
    theirs = _jobs_in(2, 1)
    runs = [
        _run(ours[0], 7),
        _run(ours[0], 9),
        _run(ours[1], True),  # corrupt: not a token
        _run(ours[2], -40),  # corrupt: not a token
        _run(theirs[0], 500),  # another shard's job
        _run(_jobs_in(3, 1)[0], True),  # shard 3's only record: a corrupt token
    ]
    lists: list[str] = []

    class Runs:
        def __init__(self, kube: object) -> None:
            pass

        async def list(self, *, namespace: str) -> list[dict[str, Any]]:
            lists.append(namespace)
            return runs

    monkeypatch.setattr(_shardfences, "JobRunStore", Runs)
    services = cast(Services, SimpleNamespace(kube=None, namespace="ns", clock=FakeClock()))
    floors = _shardfences.ShardFloors(services)
    ref = ShardRef(lease=shard_lease_name("g", 1, shards=SHARDS), shard=1, shards=SHARDS)
    empty = ShardRef(lease=shard_lease_name("g", 3, shards=SHARDS), shard=3, shards=SHARDS)

    async def both() -> tuple[int, int]:
        return await floors.floor(ref), await floors.floor(empty)

    assert asyncio.run(both()) == (9, 0)
    assert lists == ["ns"]  # one list serves every shard
