"""TickLock, Grant and KeepAlive on simulated seconds against an in-memory store: silent
skips, keep-alive cadence, loss exactly at local expiry, atLeastFor, listener isolation."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from _lease_simulation import FakeLeaseServer, simulate

from leasecron.coordination import Grant, LostLockError, Skipped, TickLock
from leasecron.models.clocks import FakeClock
from leasecron.models.configs import LockConfig

NS, LEASE = "ns", "job"
TICK = datetime(2026, 1, 1, tzinfo=UTC)


def lock(server: FakeLeaseServer, identity: str, config: LockConfig) -> TickLock:
    return TickLock(
        server.client(identity),
        server.cache(),
        namespace=NS,
        name=LEASE,
        config=config,
        identity=identity,
        clock=server.clock,
    )


def requests(tick_lock: TickLock) -> int:
    return int(tick_lock.lease.store.request_count)  # type: ignore[attr-defined]


def test_a_replica_that_sees_the_tick_taken_during_its_stagger_sends_nothing() -> None:
    server = FakeLeaseServer(FakeClock())
    config = LockConfig(at_most_for=60)

    async def main() -> tuple[Grant | Skipped, Grant | Skipped, int]:
        preferred, other = lock(server, "a", config), lock(server, "b", config)
        results = await asyncio.gather(
            preferred.try_claim(TICK), other.try_claim(TICK, stagger=0.05)
        )
        return results[0], results[1], requests(other)

    first, second, sent = simulate(server.clock, main)
    assert isinstance(first, Grant) and first.token == 1
    assert (second, sent) == (Skipped("taken", "a"), 0)


def test_keep_alive_renews_every_third_of_at_most_for() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> list[float]:
        grant = await lock(server, "a", LockConfig(at_most_for=3)).claim(TICK)
        assert grant is not None
        async with grant.keep_alive():
            await asyncio.sleep(4.5)
            grant.assert_held()
        return [at for at, _, _ in server.writes]

    start = server.clock.monotonic()
    assert [round(at - start, 6) for at in simulate(server.clock, main)] == [0, 1, 2, 3, 4]


def test_when_renewals_fail_the_grant_is_lost_exactly_when_it_expires_and_listeners_hear() -> None:
    server = FakeLeaseServer(FakeClock())
    heard: list[tuple[str, float]] = []

    def broken(grant: Grant, reason: str) -> None:
        raise RuntimeError("listener bug")

    async def recording(grant: Grant, reason: str) -> None:
        heard.append((reason, server.clock.monotonic()))

    async def main() -> tuple[float, float]:
        grant = await lock(server, "a", LockConfig(at_most_for=3)).claim(TICK)
        assert grant is not None
        async with grant.keep_alive(listeners=[broken, recording]):
            await asyncio.sleep(1.5)
            server.down = True
            assert await grant.lost.wait_async(60)
            lost_at = server.clock.monotonic()
            await asyncio.sleep(0.1)
        with pytest.raises(LostLockError, match="expired"):
            grant.assert_held()
        return lost_at, max(at for at, _, _ in server.writes)

    lost_at, last_renewal = simulate(server.clock, main)
    assert lost_at - last_renewal == pytest.approx(3.0)
    assert heard == [(heard[0][0], lost_at)]
    assert "expired" in heard[0][0]


def test_a_grant_is_lost_as_soon_as_the_cache_shows_another_holder() -> None:
    server = FakeLeaseServer(FakeClock())
    config = LockConfig(at_most_for=2)

    async def main() -> tuple[Grant, Grant, int]:
        a, b = lock(server, "a", config), lock(server, "b", config)
        old = await a.claim(TICK)
        assert old is not None
        await asyncio.sleep(2.5)  # a paused past its grant: it renewed nothing
        new = await b.claim(TICK + timedelta(minutes=1))
        assert new is not None
        await asyncio.sleep(0)
        before = requests(a)
        assert not await old.renew()
        await old.release()
        return old, new, requests(a) - before

    old, new, sent = simulate(server.clock, main)
    assert old.lost.is_set() and "b" in old.lost_reason
    assert new.token == old.token + 1
    assert sent == 0
    stored = server.stored(NS, LEASE)
    assert stored is not None
    assert (stored["spec"]["holderIdentity"], stored["spec"]["leaseTransitions"]) == ("b", 2)


def test_release_within_at_least_for_frees_the_lease_exactly_when_it_has_passed() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> list[tuple[float, str]]:
        tick_lock = lock(server, "a", LockConfig(at_most_for=10, at_least_for=4))
        grant = await tick_lock.claim(TICK)
        assert grant is not None
        await asyncio.sleep(1)
        await grant.release()
        await asyncio.sleep(5)
        await tick_lock.close()
        return [(at, obj["spec"]["holderIdentity"]) for at, _, obj in server.writes]

    start = server.clock.monotonic()
    writes = [(round(at - start, 6), holder) for at, holder in simulate(server.clock, main)]
    assert writes == [(0, "a"), (1, "a"), (4, "")]
    stored = server.stored(NS, LEASE)
    assert stored is not None and stored["spec"]["leaseDurationSeconds"] == 1


def test_no_claim_succeeds_while_the_store_is_down() -> None:
    server = FakeLeaseServer(FakeClock())
    server.down = True

    async def main() -> list[Grant | Skipped]:
        tick_lock = lock(server, "a", LockConfig(at_most_for=1))
        return [await tick_lock.try_claim(TICK + timedelta(minutes=m)) for m in range(3)]

    results = simulate(server.clock, main)
    assert all(isinstance(r, Skipped) and r.unreachable for r in results), results


def test_two_locks_of_one_process_never_free_each_others_grants() -> None:
    """A grant in this process's identity that one lock holds is not an orphan to another
    lock of the same process on the same Lease (they share the process's view)."""
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[bool, str]:
        cache = server.cache()
        first = TickLock(
            server.client("a"),
            cache,
            namespace=NS,
            name=LEASE,
            config=LockConfig(at_most_for=10),
            identity="a",
            clock=server.clock,
        )
        grant = await first.claim(TICK)
        assert grant is not None
        second = TickLock(
            server.client("a"),
            cache,
            namespace=NS,
            name=LEASE,
            config=LockConfig(at_most_for=10),
            identity="a",
            clock=server.clock,
        )
        await grant.renew()  # a change of the Lease both locks see
        await asyncio.sleep(1)
        stored = server.stored(NS, LEASE)
        assert stored is not None
        held = grant.held
        await grant.release()
        await first.close()
        await second.close()
        return held, stored["spec"]["holderIdentity"]

    assert simulate(server.clock, main) == (True, "a")
