"""The hand-over of a job's ticks between its own Lease and a shard Lease, on simulated
seconds against an in-memory store with request latency and caches that lag: a replica that
claims the job per job and one that claims it through a shard disagree on every tick, each
hands the job over or takes it back whenever it finds it on the other Lease, and whatever
the interleaving no tick runs on both and the job's token only grows."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from _lease_simulation import FakeCache, FakeLeaseServer, simulate

from leasecron.coordination import Grant, TickLock
from leasecron.coordination._views import LeaseView
from leasecron.coordination.handovers import gate_start, hand_to_shard, release_from_shard
from leasecron.coordination.locks import SKIP_SHARDED
from leasecron.coordination.resourcelocks import LeaseLock
from leasecron.coordination.shards import ShardLock, shard_config
from leasecron.models.clocks import FakeClock
from leasecron.models.configs import LockConfig
from leasecron.models.leases import LeaseRecord, lease_annotations
from leasecron.models.shards import (
    ShardGate,
    ShardRef,
    parse_gate,
    runs_under_shard,
    shard_lease_name,
)

NS, JOB = "ns", "billing"
JOB_LEASE = "leasecron-job-billing"
SHARD = ShardRef(lease=shard_lease_name("default", 1, shards=4), shard=1, shards=4)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TICKS = 40
EPSILON = timedelta(microseconds=1)
CONFIG = LockConfig(at_most_for=2, at_least_for=0, keep_alive=False)

Run = tuple[datetime, int, str, float, float]
"""tick, token, which Lease claimed it, start and end on the simulated monotonic clock."""


def _every_second(after: datetime) -> datetime:
    """The job's schedule: every whole second from T0, the first one after `after`."""
    return T0 + timedelta(seconds=math.floor((after - T0).total_seconds()) + 1)


def _lease(server: FakeLeaseServer, cache: FakeCache, name: str, who: str) -> LeaseLock:
    return LeaseLock(
        server.client(who),
        LeaseView.shared(cache, clock=server.clock),
        namespace=NS,
        name=name,
        labels={},
    )


async def _zero() -> int:
    return 0


async def _per_job_replica(
    server: FakeLeaseServer, cache: FakeCache, rng: random.Random, runs: list[Run]
) -> None:
    """Claims every tick on the job's own Lease; takes the job back from the shard first
    (on one tick in two) when its Lease hands the tick to it."""
    lock = TickLock(
        server.client("p"),
        cache,
        namespace=NS,
        name=JOB_LEASE,
        config=CONFIG,
        identity="p",
        clock=server.clock,
    )
    job_lease = _lease(server, cache, JOB_LEASE, "p")

    async def take_back() -> bool:
        return await release_from_shard(
            JOB,
            job_lease,
            lambda gate: _lease(server, cache, gate.lease, "p"),
            shard_floor=lambda gate: _zero(),
            clock=server.clock,
            fallback_s=CONFIG.lease_duration_s,
        )

    for k in range(TICKS):
        tick = T0 + timedelta(seconds=k)
        await _until(server, tick, rng)
        result = await lock.try_claim(tick, starting_deadline=0.9)
        shard_has_it = not isinstance(result, Grant) and result.reason == SKIP_SHARDED
        if shard_has_it and rng.random() < 0.5 and await take_back():
            result = await lock.try_claim(tick, starting_deadline=0.9)
        if isinstance(result, Grant):
            start = server.clock.monotonic()
            await asyncio.sleep(rng.uniform(0.0, 1.2))
            runs.append((tick, result.token, "per-job", start, server.clock.monotonic()))
            await lock.release(result)
    await lock.close()


async def _sharded_replica(
    server: FakeLeaseServer, cache: FakeCache, rng: random.Random, runs: list[Run]
) -> None:
    """Claims every instant on the shard Lease and runs the job when its own Lease (as this
    replica's cache shows it) hands the instant to the shard and the shard has not let go."""
    lock = ShardLock(
        server.client("s"),
        cache,
        namespace=NS,
        name=SHARD.lease,
        config=shard_config(2),
        identity="s",
        clock=server.clock,
    )
    job_lease = _lease(server, cache, JOB_LEASE, "s")

    def gate() -> ShardGate | None:
        seen = job_lease.observe()
        return parse_gate(lease_annotations(seen.obj)) if seen is not None else None

    for k in range(TICKS):
        tick = T0 + timedelta(seconds=k)
        await _until(server, tick, rng)
        above = max((g.token for g in [gate()] if g is not None), default=0)
        result = await lock.try_claim(tick, starting_deadline=0.9, above=above)
        if isinstance(result, Grant):
            async with lock.use(result):
                released = lock.released(result)
                if runs_under_shard(
                    JOB, tick, gate=gate(), lease=SHARD.lease, released=released, token=result.token
                ):
                    start = server.clock.monotonic()
                    await asyncio.sleep(rng.uniform(0.0, 0.3))
                    runs.append((tick, result.token, "shard", start, server.clock.monotonic()))
    await lock.close()


async def _handing_over(
    server: FakeLeaseServer, cache: FakeCache, rng: random.Random, until: datetime
) -> None:
    """The sharded replica's hand-overs: at random moments, whenever its cache shows the job's
    Lease without a gate (a per-job run may or may not go then)."""
    job_lease = _lease(server, cache, JOB_LEASE, "s")

    def gate_for(record: LeaseRecord | None, token: int) -> ShardGate:
        start = gate_start(record, first_after=_every_second, not_before=T0 - EPSILON)
        return ShardGate(ref=SHARD, start=start, token=token)

    while server.clock.now() < until:
        await asyncio.sleep(rng.uniform(0.1, 0.5))
        seen = job_lease.observe()
        if seen is None or parse_gate(lease_annotations(seen.obj)) is None:
            await hand_to_shard(
                job_lease,
                gate_for=gate_for,
                floor=_zero,
                clock=server.clock,
                fallback_s=CONFIG.lease_duration_s,
            )


async def _until(server: FakeLeaseServer, tick: datetime, rng: random.Random) -> None:
    """Sleep until `tick` on the fake wall clock, plus a random stagger."""
    wait = (tick - server.clock.now()).total_seconds()
    await asyncio.sleep(max(0.0, wait) + rng.uniform(0.0, 0.2))


def _simulate(seed: int, *, latency: Callable[[random.Random], float]) -> list[Run]:
    rng = random.Random(seed)
    clock = FakeClock(start=T0 - timedelta(seconds=1))
    server = FakeLeaseServer(clock, latency=lambda: latency(rng))
    runs: list[Run] = []

    async def main() -> None:
        per_job_cache = server.cache(delay=rng.uniform(0.0, 0.4))
        shard_cache = server.cache(delay=rng.uniform(0.0, 0.4))
        end = T0 + timedelta(seconds=TICKS)
        await asyncio.gather(
            _per_job_replica(server, per_job_cache, random.Random(rng.random()), runs),
            _sharded_replica(server, shard_cache, random.Random(rng.random()), runs),
            _handing_over(server, shard_cache, random.Random(rng.random()), end),
        )

    simulate(clock, main)
    return sorted(runs)


def _check(runs: list[Run]) -> None:
    ticks = [run[0] for run in runs]
    twice = sorted({t for t in ticks if ticks.count(t) > 1})
    assert not twice, f"ticks run on both Leases: {twice}"
    falling = [(a, b) for a, b in itertools.pairwise(runs) if b[1] <= a[1]]
    assert not falling, f"the token did not grow from one run to the next: {falling}"
    # A job handed to a shard does not start there while its per-job run still goes.
    per_job = [(start, end) for _, _, who, start, end in runs if who == "per-job"]
    overlaps = [
        run for run in runs if run[2] == "shard" and any(s < run[3] < e for s, e in per_job)
    ]
    assert not overlaps, f"shard runs started while a per-job run went: {overlaps}"


@pytest.mark.parametrize("seed", range(40))
def test_no_tick_runs_on_both_leases_and_the_token_only_grows(seed: int) -> None:
    runs = _simulate(seed, latency=lambda rng: rng.uniform(0.0, 0.15))
    _check(runs)
    # The job really moved: both Leases ran some of its ticks.
    assert {run[2] for run in runs} == {"per-job", "shard"}, runs
