"""GroupRecord and ShardLock over it, on simulated seconds against an in-memory store: a claim
above the token ceiling raises it first (one write for many claims), a shard Lease created
again starts above the ceiling, instants at or before the floor tick are taken, a retired
shard Lease is never claimed, a corrupt record is followed at its last good state and never
overwritten, and a change of shard count retires the old shards before writing the new count."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from _lease_simulation import FakeCache, FakeLeaseServer, simulate

from leasecron.coordination import (
    Grant,
    GroupRecord,
    ShardCountChange,
    ShardCountError,
    Skipped,
    change_shard_count,
)
from leasecron.coordination.shards import ShardLock, shard_config, shard_labels
from leasecron.kube.watches import WatchEvent
from leasecron.models.clocks import FakeClock
from leasecron.models.groups import (
    ANNOTATION_RETIRED,
    ANNOTATION_SHARDS,
    ANNOTATION_TOKEN_CEILING,
    TOKEN_BLOCK,
    GroupState,
    group_lease_name,
    parse_group,
)
from leasecron.models.leases import lease_annotations, with_annotations
from leasecron.models.names import format_tick
from leasecron.models.shards import ShardRef, shard_lease_name

NS, GROUP = "ns", "billing"
RECORD = group_lease_name(GROUP)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def tick(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Replica:
    def __init__(self, server: FakeLeaseServer, identity: str, *, shards: int = 4) -> None:
        self.server, self.identity = server, identity
        self.client = server.client(identity)
        self.cache: FakeCache = server.cache()
        self.group = GroupRecord(
            self.client,
            self.cache,
            namespace=NS,
            group=GROUP,
            identity=identity,
            configured_shards=shards,
            clock=server.clock,
        )

    def shard(self, index: int = 0, *, group: bool = True) -> ShardLock:
        return ShardLock(
            self.client,
            self.cache,
            namespace=NS,
            name=shard_lease_name(GROUP, index, shards=self.group.state.shards),
            config=shard_config(3),
            identity=self.identity,
            clock=self.server.clock,
            group=self.group if group else None,
        )


def record(server: FakeLeaseServer) -> GroupState:
    obj = server.stored(NS, RECORD)
    assert obj is not None
    return parse_group(lease_annotations(obj))


def token_of(server: FakeLeaseServer, name: str) -> int:
    obj = server.stored(NS, name)
    assert obj is not None
    return int(obj["spec"]["leaseTransitions"])


async def delete(server: FakeLeaseServer, name: str) -> None:
    """`kubectl delete lease`: gone from the store, and a DELETED event to every cache (after
    the events of earlier writes)."""
    await asyncio.sleep(0.01)
    obj = server.objects.pop((NS, name))
    for cache in server.caches:
        cache.objects.pop((NS, name), None)
        for callback in list(cache._subscribers):
            callback(WatchEvent(type="DELETED", obj=obj, observed_at=server.clock.monotonic()))


def edit(server: FakeLeaseServer, name: str, changes: dict[str, str | None]) -> None:
    """An administrator's edit of a Lease's annotations (a write every cache sees)."""
    obj = server.stored(NS, name)
    assert obj is not None
    server._store("MODIFIED", (NS, name), with_annotations(obj, changes), "admin")


async def claimed(lock: ShardLock, instant: datetime) -> Grant:
    result = await lock.try_claim(instant)
    assert isinstance(result, Grant), result
    await lock.release(result)
    return result


def test_the_first_replica_creates_the_record_and_one_configured_otherwise_follows_it() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[GroupState, GroupState]:
        first = await Replica(server, "a", shards=4).group.start()
        second = await Replica(server, "b", shards=16).group.start()
        return first, second

    first, second = simulate(server.clock, main)
    assert first == second == GroupState(shards=4)
    assert record(server) == GroupState(shards=4)


def test_a_claim_above_the_ceiling_raises_it_before_the_shard_lease_carries_the_token() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> list[int]:
        a = Replica(server, "a")
        await a.group.start()
        lock = a.shard()
        return [(await claimed(lock, tick(s))).token for s in range(3)]

    tokens = simulate(server.clock, main)
    assert tokens == [1, 2, 3]
    assert record(server).ceiling == 1 + TOKEN_BLOCK
    names = [obj["metadata"]["name"] for _, _, obj in server.writes]
    # record created, ceiling raised, then the shard Lease created: one raise for all claims
    assert names[:3] == [RECORD, RECORD, shard_lease_name(GROUP, 0, shards=4)]
    assert names.count(RECORD) == 2


def test_claims_due_at_once_on_many_shards_never_write_a_token_above_the_ceiling() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> None:
        a = Replica(server, "a")
        await a.group.start()
        await asyncio.gather(*(claimed(a.shard(i), tick(0)) for i in range(4)))

    simulate(server.clock, main)
    assert all(
        token_of(server, shard_lease_name(GROUP, i, shards=4)) <= record(server).ceiling
        for i in range(4)
    )


def test_a_shard_lease_created_again_starts_above_every_token_it_carried() -> None:
    server = FakeLeaseServer(FakeClock())
    name = shard_lease_name(GROUP, 0, shards=4)

    async def main() -> tuple[int, int]:
        a, b = Replica(server, "a"), Replica(server, "b")
        await a.group.start()
        await b.group.start()
        before = (await claimed(a.shard(), tick(0))).token
        await delete(server, name)
        after = (await claimed(b.shard(), tick(1))).token
        return before, after

    before, after = simulate(server.clock, main)
    assert after > before
    assert after == before + TOKEN_BLOCK + 1  # the first token above the raised ceiling
    assert token_of(server, name) <= record(server).ceiling


def test_without_the_group_record_a_shard_lease_created_again_starts_over() -> None:
    """What the record prevents (the same scenario without it)."""
    server = FakeLeaseServer(FakeClock())
    name = shard_lease_name(GROUP, 0, shards=4)

    async def main() -> tuple[int, int]:
        a = Replica(server, "a")
        before = (await claimed(a.shard(group=False), tick(0))).token
        before = (await claimed(a.shard(group=False), tick(1))).token
        await delete(server, name)
        return before, (await claimed(a.shard(group=False), tick(2))).token

    before, after = simulate(server.clock, main)
    assert after < before


def test_instants_at_or_before_the_floor_tick_are_taken() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[Grant | Skipped, Grant | Skipped, bool]:
        a = Replica(server, "a")
        await a.group.start()
        edit(server, RECORD, {"leasecron.dev/floor-tick": format_tick(tick(10))})
        await asyncio.sleep(0)
        lock = a.shard()
        at_floor = await lock.try_claim(tick(10))
        taken = lock.taken_by_other(tick(5))
        after = await lock.try_claim(tick(11))
        return at_floor, after, taken

    at_floor, after, taken = simulate(server.clock, main)
    assert at_floor == Skipped("taken", "")
    assert taken
    assert isinstance(after, Grant) and after.tick == tick(11)


def test_a_retired_shard_lease_is_never_claimed() -> None:
    server = FakeLeaseServer(FakeClock())
    name = shard_lease_name(GROUP, 0, shards=4)

    async def main() -> Grant | Skipped:
        a = Replica(server, "a")
        await a.group.start()
        await claimed(a.shard(), tick(0))
        edit(server, name, {ANNOTATION_RETIRED: "replaced by 8 shards"})
        await asyncio.sleep(0)
        return await a.shard().try_claim(tick(1))

    assert simulate(server.clock, main) == Skipped("retired", "")


def test_a_corrupt_record_keeps_the_last_good_state_and_is_never_overwritten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[list[Grant | Skipped], GroupState, bool]:
        a = Replica(server, "a")
        await a.group.start()
        lock = a.shard()
        results: list[Grant | Skipped] = [await claimed(lock, tick(0))]
        edit(server, RECORD, {ANNOTATION_SHARDS: "many"})
        await asyncio.sleep(0)
        results.append(await claimed(lock, tick(1)))  # within the ceiling: still claimed
        edit(server, RECORD, {ANNOTATION_TOKEN_CEILING: "2"})  # shards still "many"
        await asyncio.sleep(0)
        results.append(await a.shard(1).try_claim(tick(1)))  # needs a raise: skipped
        return results, a.group.state, a.group.readable

    results, state, readable = simulate(server.clock, main)
    assert isinstance(results[0], Grant) and isinstance(results[1], Grant)
    assert results[2] == Skipped("group_record_unreadable", "")
    assert state.shards == 4 and not readable
    obj = server.stored(NS, RECORD)
    assert obj is not None and lease_annotations(obj)[ANNOTATION_SHARDS] == "many"


def test_a_count_change_retires_the_old_shards_and_the_new_ones_start_above_them() -> None:
    server = FakeLeaseServer(FakeClock())
    reports: list[str] = []

    async def main() -> tuple[Grant | Skipped, Grant | Skipped, Grant, Grant, ShardCountChange]:
        a = Replica(server, "a", shards=2)
        await a.group.start()
        old_lock = a.shard(0)
        old = await claimed(old_lock, tick(30))
        change = await change_shard_count(
            server.client("admin"), namespace=NS, group=GROUP, shards=3, report=reports.append
        )
        await asyncio.sleep(0.01)
        assert a.group.state.shards == 3
        on_old = await old_lock.try_claim(tick(31))
        again = await a.shard(0).try_claim(tick(30))
        new = await claimed(a.shard(0), tick(31))
        return on_old, again, new, old, change

    on_old, again, new, old, change = simulate(server.clock, main)
    assert on_old == Skipped("retired", "")
    assert again == Skipped("taken", "")
    assert new.token > old.token
    assert new.name == shard_lease_name(GROUP, 0, shards=3)
    assert (change.after.shards, change.after.floor_tick) == (3, tick(30))
    assert change.after.ceiling >= old.token
    assert change.placeholders == (shard_lease_name(GROUP, 1, shards=2),)
    placeholder = server.stored(NS, shard_lease_name(GROUP, 1, shards=2))
    assert placeholder is not None and ANNOTATION_RETIRED in lease_annotations(placeholder)
    assert any("retired" in line for line in reports)


def test_a_count_change_back_to_a_count_whose_leases_are_left_is_refused() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> None:
        await Replica(server, "a", shards=2).group.start()
        admin = server.client("admin")
        await change_shard_count(admin, namespace=NS, group=GROUP, shards=3)
        with pytest.raises(ShardCountError, match="delete them first"):
            await change_shard_count(admin, namespace=NS, group=GROUP, shards=2)

    simulate(server.clock, main)
    assert record(server).shards == 3


def test_a_deleted_record_is_written_again_with_the_last_ceiling_this_replica_knew() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[int, int]:
        a = Replica(server, "a")
        await a.group.start()
        await claimed(a.shard(0), tick(0))
        ceiling = record(server).ceiling
        await delete(server, RECORD)
        return ceiling, (await claimed(a.shard(1), tick(0))).token

    ceiling, token = simulate(server.clock, main)
    assert token > ceiling  # the new shard Lease starts above the deleted record's ceiling
    assert record(server).ceiling >= token


def test_a_shard_lease_of_another_count_than_the_record_is_never_claimed() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> Grant | Skipped:
        a = Replica(server, "a", shards=4)
        await a.group.start()
        lock = ShardLock(
            a.client,
            a.cache,
            namespace=NS,
            name=(name := shard_lease_name(GROUP, 0, shards=2)),
            labels=shard_labels(GROUP, ShardRef(lease=name, shard=0, shards=2)),
            config=shard_config(3),
            identity="a",
            clock=server.clock,
            group=a.group,
        )
        return await lock.try_claim(tick(0))

    assert simulate(server.clock, main) == Skipped("other_shard_count", "")
    assert server.stored(NS, shard_lease_name(GROUP, 0, shards=2)) is None
