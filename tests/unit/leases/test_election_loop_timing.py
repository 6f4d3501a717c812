"""The Elector's timing on simulated seconds: silent standbys, takeover exactly at local
expiry, step-down within renewDeadline when the store fails, at-once handover on release."""

from __future__ import annotations

import asyncio
import copy
import itertools

import pytest
from _lease_simulation import FakeLeaseServer, simulate

from leasecron.coordination import Elector, Term
from leasecron.models.clocks import FakeClock
from leasecron.models.configs import ElectionConfig

CONFIG = ElectionConfig(lease_duration=15, renew_deadline=10, retry_period=2)
NS, LEASE = "ns", "leader"


def elector(server: FakeLeaseServer, identity: str, **kw: object) -> Elector:
    return Elector(
        server.client(identity),
        server.cache(),
        namespace=NS,
        name=LEASE,
        config=CONFIG,
        identity=identity,
        clock=server.clock,
        **kw,  # type: ignore[arg-type]
    )


async def leading(candidate: Elector) -> Term:
    term = await candidate.wait_leading(timeout=600.0)
    assert term is not None
    return term


def last_write_by(server: FakeLeaseServer, client: str) -> float:
    return max(at for at, who, _ in server.writes if who == client)


def test_a_standby_sends_nothing_and_takes_over_exactly_one_lease_duration_after_a_crash() -> None:
    clock = FakeClock()
    server = FakeLeaseServer(clock)

    async def main() -> tuple[float, float, int, int]:
        a, b = elector(server, "a"), elector(server, "b")
        task_a = a.start()
        first = await leading(a)
        b.start()
        await asyncio.sleep(120)  # two simulated minutes of renewals by a
        quiet = b.lease.store.request_count  # type: ignore[attr-defined]
        task_a.cancel()  # a crashes: no release, no more renewals
        crashed_after = last_write_by(server, "a")
        second = await leading(b)
        await b.stop()
        return crashed_after, second.started_at, quiet, second.token - first.token

    last_renewal, taken_at, standby_requests, token_step = simulate(clock, main)
    assert standby_requests == 0
    assert taken_at - last_renewal == pytest.approx(CONFIG.lease_duration.total_seconds())
    assert token_step == 1


def test_the_leader_renews_every_retry_period() -> None:
    clock = FakeClock()
    server = FakeLeaseServer(clock)

    async def main() -> list[float]:
        a = elector(server, "a")
        a.start()
        await leading(a)
        await asyncio.sleep(9)
        await a.stop(release=False)
        return [at for at, _, _ in server.writes]

    writes = simulate(clock, main)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(writes)]
    assert gaps == [2.0, 2.0, 2.0, 2.0]


def test_when_the_store_fails_the_leader_steps_down_within_renew_deadline_and_returns() -> None:
    clock = FakeClock()
    server = FakeLeaseServer(clock)
    stopped: list[float] = []

    async def main() -> tuple[float, float, float, float, int]:
        a = elector(server, "a", on_stopped_leading=lambda term: stopped.append(clock.monotonic()))
        a.start()
        term = await leading(a)
        await asyncio.sleep(5)
        server.down = True
        failed_at = clock.monotonic()
        last_renewal = last_write_by(server, "a")
        assert await term.lost.wait_async(60)
        lost_at = clock.monotonic()
        assert not a.is_leader
        await asyncio.sleep(30)
        server.down = False
        back_at = clock.monotonic()
        again = await leading(a)
        await a.stop()
        return (
            failed_at,
            last_renewal,
            lost_at,
            again.started_at - back_at,
            again.token - term.token,
        )

    failed_at, last_renewal, lost_at, resumed_after, token_step = simulate(clock, main)
    assert lost_at - last_renewal == pytest.approx(CONFIG.renew_deadline.total_seconds())
    assert lost_at - failed_at <= CONFIG.renew_deadline.total_seconds()
    assert stopped[0] == lost_at  # the second entry is the final stop()
    assert resumed_after <= CONFIG.retry_period.total_seconds()
    assert token_step == 1  # a new term after stepping down, even for the same holder


def test_stop_with_release_hands_over_to_a_standby_in_the_same_instant() -> None:
    clock = FakeClock()
    server = FakeLeaseServer(clock)

    async def main() -> tuple[float, Term, Term]:
        a, b = elector(server, "a"), elector(server, "b")
        a.start()
        first = await leading(a)
        b.start()
        await asyncio.sleep(7)
        released_at = clock.monotonic()
        await a.stop(release=True)
        second = await leading(b)
        await b.stop()
        return released_at, first, second

    released_at, first, second = simulate(clock, main)
    assert second.started_at - released_at == pytest.approx(0.0, abs=1e-6)
    assert first.lost.is_set()
    assert second.token == first.token + 1
    stored = server.stored(NS, LEASE)
    assert stored is not None and stored["spec"]["holderIdentity"] == ""


def test_rendezvous_stagger_lets_the_preferred_candidate_take_a_released_lease() -> None:
    clock = FakeClock()
    server = FakeLeaseServer(clock)

    async def main() -> str:
        a = elector(server, "a")
        a.start()
        await leading(a)
        later = [
            elector(server, name, stagger=lambda d=delay: d)
            for name, delay in (("b", 0.5), ("c", 0.0))
        ]
        for candidate in later:
            candidate.start()
        await asyncio.sleep(3)
        await a.stop(release=True)
        await asyncio.sleep(1)
        winner = next(c.identity for c in later if c.is_leader)
        for candidate in later:
            await candidate.stop(release=False)
        return winner

    assert simulate(clock, main) == "c"
    assert [who for _, who, _ in server.writes].count("b") == 0


def test_a_leader_whose_lease_is_taken_steps_down_in_the_same_instant_and_contends_again() -> None:
    clock = FakeClock()
    server = FakeLeaseServer(clock)

    async def main() -> tuple[float, float, Term, Term]:
        a = elector(server, "a")
        a.start()
        term = await leading(a)
        await asyncio.sleep(3.3)
        stored = server.stored(NS, LEASE)
        assert stored is not None
        taken = copy.deepcopy(stored)
        taken["spec"].update(holderIdentity="intruder", leaseTransitions=term.token + 7)
        server.replace(NS, taken, "intruder")
        taken_at = clock.monotonic()
        assert await term.lost.wait_async(60)
        lost_at = clock.monotonic()
        again = await leading(a)  # the intruder never renews: its lease expires
        await a.stop()
        return taken_at, lost_at, term, again

    taken_at, lost_at, term, again = simulate(clock, main)
    assert lost_at == taken_at
    assert again.token == term.token + 8
    assert again.started_at - taken_at == pytest.approx(CONFIG.lease_duration.total_seconds())
