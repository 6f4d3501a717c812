"""ShardLock on simulated seconds against an in-memory store: the holder claims the next
instant over its own live grant, every grant in use is renewed together and released at
once when the last use ends, others wait for the shard instead of giving the instant up, and
a grant is lost the moment another replica holds the shard."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from _lease_simulation import FakeLeaseServer, simulate

from leasecron.coordination import Grant, Skipped
from leasecron.coordination.shards import ShardLock, shard_config
from leasecron.models.clocks import FakeClock

NS, LEASE = "ns", "leasecron-shard-default-4-0"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)


def shard(server: FakeLeaseServer, identity: str) -> ShardLock:
    return ShardLock(
        server.client(identity),
        server.cache(),
        namespace=NS,
        name=LEASE,
        config=shard_config(3),
        identity=identity,
        clock=server.clock,
    )


def holders(server: FakeLeaseServer) -> list[tuple[float, str, int]]:
    return [
        (round(at, 6), obj["spec"]["holderIdentity"], obj["spec"]["leaseTransitions"])
        for at, _, obj in server.writes
    ]


def test_the_holder_claims_the_next_instant_over_its_own_grant_and_frees_the_shard_once() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[Grant, Grant, Grant | Skipped]:
        a, b = shard(server, "a"), shard(server, "b")
        first = await a.try_claim(T0)
        assert isinstance(first, Grant)
        async with a.use(first):
            await asyncio.sleep(0.9)  # b's cache sees the grant meanwhile
            second = await a.try_claim(T1)
            assert isinstance(second, Grant)
            async with a.use(second):
                other = await b.try_claim(T1 + timedelta(seconds=1))
                await asyncio.sleep(0.5)
                assert first.held and second.held
        await asyncio.sleep(0.1)
        return first, second, other

    start = server.clock.monotonic()
    first, second, other = simulate(server.clock, main)
    assert (first.token, second.token) == (1, 2)
    assert second.replaced_tick == T0 and not second.replaced_unrun
    assert other == Skipped("live_grant", "a")
    writes = [(round(at - start, 6), holder, token) for at, holder, token in holders(server)]
    # claim, claim over our own grant (which renews the shard: the next renewal would be a
    # third of 3 s after it), one release
    assert writes == [(0, "a", 1), (0.9, "a", 2), (1.4, "", 2)]


def test_grants_in_use_are_renewed_together_and_lost_together_when_renewals_fail() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[list[Grant], float, float]:
        a = shard(server, "a")
        first = await a.try_claim(T0)
        assert isinstance(first, Grant)
        async with a.use(first):
            second = await a.try_claim(T1)
            assert isinstance(second, Grant)
            async with a.use(second):
                await asyncio.sleep(2.5)  # renewed at 1 and 2 (every third of 3 s)
                assert first.held and second.held
                server.down = True
                renewed = max(at for at, _, _ in server.writes)
                assert await first.lost.wait_async(10)
                lost_at = server.clock.monotonic()
        return [first, second], renewed, lost_at

    grants, renewed, lost_at = simulate(server.clock, main)
    assert all(g.lost.is_set() for g in grants)
    assert round(lost_at - renewed, 6) == 3.0


def test_a_replica_that_met_a_live_grant_takes_the_shard_when_its_holder_stops_renewing() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[Grant, bool, Grant | Skipped, float]:
        a, b = shard(server, "a"), shard(server, "b")
        held = await a.try_claim(T0)
        assert isinstance(held, Grant)
        a._uses[held.token] = 1  # a "dies" mid-run: nothing renews its grant any more
        await asyncio.sleep(0)
        skipped = await b.try_claim(T1)
        assert skipped == Skipped("live_grant", "a")
        started = server.clock.monotonic()
        free = await b.wait_claimable(T1, timeout=30)
        waited = server.clock.monotonic() - started
        taken = await b.try_claim(T1)
        await asyncio.sleep(0)
        return held, free, taken, waited

    held, free, taken, waited = simulate(server.clock, main)
    assert free and 2.9 < waited < 3.1
    assert isinstance(taken, Grant) and taken.token == held.token + 1
    assert held.lost.is_set() and "b" in held.lost_reason


def test_waiting_for_a_shard_ends_without_a_claim_when_its_holder_takes_the_instant() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> bool:
        a, b = shard(server, "a"), shard(server, "b")
        held = await a.try_claim(T0)
        assert isinstance(held, Grant)
        async with a.use(held):
            await asyncio.sleep(0)
            assert await b.try_claim(T1) == Skipped("live_grant", "a")
            waiting = asyncio.ensure_future(b.wait_claimable(T1, timeout=30))
            await asyncio.sleep(0.5)
            assert isinstance(await a.try_claim(T1), Grant)
            return await waiting

    assert simulate(server.clock, main) is False


def test_closing_a_lock_whose_runs_ended_frees_the_shard_instead_of_letting_it_expire() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> None:
        a = shard(server, "a")
        grant = await a.try_claim(T0)
        assert isinstance(grant, Grant)
        async with a.use(grant):
            await asyncio.sleep(0.5)
        await a.close()

    simulate(server.clock, main)
    stored = server.stored(NS, LEASE)
    assert stored is not None and stored["spec"]["holderIdentity"] == ""
