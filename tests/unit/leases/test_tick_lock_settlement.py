"""TickLock on simulated seconds when a reply is lost or a write cannot be made (docs/design.md
§5.7): a lost claim reply is read back and adopted when it landed; a claim whose read-back
fails too is remembered as uncertain and adopted (handed to `on_orphan`, else released) when
the view shows it; a release that cannot be written is kept and freed when the store answers,
an adopted orphan's too (until it expires, and not once another replica holds the Lease); a
caller that stops while its claim is on the wire hands the landed claim back. Also who holds the
Lease: `held_by_other` and `taken_by_other` of a TickLock and of a ShardLock."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _lease_simulation import FakeClient, FakeLeaseServer, simulate

from leasecron.coordination import Grant, ReleaseResult, Skipped, TickLock
from leasecron.coordination.locks import OrphanHandler
from leasecron.coordination.shards import ShardLock, ShardRules, shard_config
from leasecron.kube.errors import Conflict, OutcomeUnknown, Unavailable
from leasecron.models.clocks import FakeClock
from leasecron.models.configs import LockConfig

NS, LEASE = "ns", "job"
TICK = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = LockConfig(at_most_for=10)


class LossyClient(FakeClient):
    """A replica's connection whose next `lose` write replies are lost after the write
    landed, whose next `fail_gets` reads fail, and whose next replaces fail (not sent) with
    the errors in `fail_replaces`, one each, in order."""

    def __init__(self, server: FakeLeaseServer, name: str) -> None:
        super().__init__(server, name)
        self.lose = 0
        self.fail_gets = 0
        self.fail_replaces: list[Exception] = []

    def _lost(self, answer: dict[str, Any]) -> dict[str, Any]:
        if self.lose <= 0:
            return answer
        self.lose -= 1
        raise OutcomeUnknown("reply lost", reason="Injected")

    async def get(
        self,
        *,
        namespace: str,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any] | None:
        if self.fail_gets > 0:
            self.fail_gets -= 1
            raise Unavailable("read failed", reason="Injected")
        return await super().get(namespace=namespace, name=name)

    async def create(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        return self._lost(await super().create(namespace=namespace, body=body))

    async def replace(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        if self.fail_replaces:
            self.requests["replace"] += 1
            raise self.fail_replaces.pop(0)
        return self._lost(await super().replace(namespace=namespace, body=body))


def lock(
    server: FakeLeaseServer,
    client: FakeClient,
    *,
    on_orphan: OrphanHandler | None = None,
    config: LockConfig = CONFIG,
) -> TickLock:
    return TickLock(
        client,
        server.cache(),
        namespace=NS,
        name=LEASE,
        config=config,
        identity=client.name,
        clock=server.clock,
        on_orphan=on_orphan,
    )


def holder(server: FakeLeaseServer) -> tuple[str, int]:
    stored = server.stored(NS, LEASE)
    assert stored is not None
    return stored["spec"]["holderIdentity"], stored["spec"]["leaseTransitions"]


def test_a_claim_whose_reply_is_lost_is_read_back_and_is_ours_when_it_landed() -> None:
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")

    async def main() -> tuple[Grant | Skipped, int]:
        a = lock(server, client)
        first = await a.claim(TICK)
        assert first is not None
        await asyncio.sleep(0)
        assert await first.release() == ReleaseResult.FREED
        await asyncio.sleep(0)
        client.lose = 1
        gets = client.requests["get"]
        result = await a.try_claim(TICK + timedelta(minutes=1))
        read = client.requests["get"] - gets
        await a.close()
        return result, read

    result, read = simulate(server.clock, main)
    assert isinstance(result, Grant) and result.token == 2 and result.held
    assert result.tick == TICK + timedelta(minutes=1) and result.replaced_tick == TICK
    assert read == 1
    assert holder(server) == ("a", 2)


def test_an_uncertain_claim_that_landed_is_adopted_by_on_orphan_when_the_view_shows_it() -> None:
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")
    adopted: list[Grant] = []

    async def take_over(grant: Grant) -> None:
        adopted.append(grant)
        await grant.release()

    async def main() -> Grant | Skipped:
        a = lock(server, client, on_orphan=take_over)
        client.lose, client.fail_gets = 1, 1
        result = await a.try_claim(TICK)  # lands; the reply and the read-back are lost
        await asyncio.sleep(0.1)  # the view shows the claim: our orphan
        await a.close()
        return result

    result = simulate(server.clock, main)
    assert result == Skipped("uncertain", "")
    assert [(g.token, g.tick, g.replaced_tick) for g in adopted] == [(1, TICK, None)]
    assert holder(server) == ("", 1)


def test_a_claim_decided_over_our_uncertain_claim_does_not_overwrite_it_once_adopted() -> None:
    """The watch shows our claim of MINUTE (reply and read-back lost) while our claim of the
    next minute is being decided: the orphan is adopted before that claim's write goes out.
    The write must not replace the adopted grant (its ticks, and the ticks it replaced, run
    under it; replaced, they would be nobody's): the claim skips and is decided again."""
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")
    adopted: list[Grant] = []
    minute = TICK + timedelta(minutes=1)

    async def take_over(grant: Grant) -> None:
        adopted.append(grant)

    async def main() -> tuple[Grant | Skipped, tuple[str, int]]:
        cache = server.cache()
        a = TickLock(
            client,
            cache,
            namespace=NS,
            name=LEASE,
            config=CONFIG,
            identity="a",
            clock=server.clock,
            on_orphan=take_over,
        )
        first = await a.claim(TICK)
        assert first is not None and await first.release() == ReleaseResult.FREED
        await asyncio.sleep(0.1)
        cache.connected = False  # the watch falls behind
        client.lose, client.fail_gets = 1, 1
        assert await a.try_claim(minute) == Skipped("uncertain", "")
        claiming = asyncio.ensure_future(a.try_claim(minute + timedelta(minutes=1)))
        cache.connected = True  # ... and shows the orphan as the next claim is decided
        stored = server.stored(NS, LEASE)
        assert stored is not None
        cache.deliver("MODIFIED", (NS, LEASE), copy.deepcopy(stored))
        result = await claiming
        held = holder(server)
        await a.close()
        return result, held

    result, held = simulate(server.clock, main)
    assert [(g.token, g.tick, g.replaced_tick) for g in adopted] == [(2, minute, TICK)]
    assert result == Skipped("conflict", "a")
    assert held == ("a", 2)


def test_an_uncertain_claim_that_landed_is_released_without_an_orphan_handler() -> None:
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")

    async def main() -> Grant | Skipped:
        a = lock(server, client)
        client.lose, client.fail_gets = 1, 1
        result = await a.try_claim(TICK)
        await asyncio.sleep(0.1)
        await a.close()
        return result

    result = simulate(server.clock, main)
    assert isinstance(result, Skipped) and result.unreachable
    assert holder(server) == ("", 1)


def test_an_orphan_of_ours_not_from_an_uncertain_claim_is_freed_not_adopted() -> None:
    server = FakeLeaseServer(FakeClock())
    adopted: list[Grant] = []

    async def take_over(grant: Grant) -> None:
        adopted.append(grant)

    async def main() -> None:
        # Another view than the claimer's (as a process that started again with the same
        # identity): it knows nothing of the grant, which is not an uncertain claim of its own.
        later = lock(server, server.client("a"), on_orphan=take_over)
        earlier = lock(server, server.client("a"))
        await earlier.close()
        assert isinstance(await earlier.try_claim(TICK), Grant)
        await asyncio.sleep(0.1)
        await later.close()

    simulate(server.clock, main)
    assert adopted == []
    assert holder(server) == ("", 1)


def test_a_release_that_cannot_be_written_is_kept_and_freed_when_the_store_answers() -> None:
    server = FakeLeaseServer(FakeClock())

    async def main() -> tuple[ReleaseResult, tuple[str, int], float]:
        a = lock(server, server.client("a"))
        grant = await a.claim(TICK)
        assert grant is not None
        await asyncio.sleep(0)
        server.down = True
        released = await grant.release()
        await asyncio.sleep(1)
        during = holder(server)
        server.down = False
        await asyncio.sleep(5)
        freed_at = max(at for at, _, _ in server.writes)
        await a.close()
        return released, during, freed_at

    start = server.clock.monotonic()
    released, during, freed_at = simulate(server.clock, main)
    assert released == ReleaseResult.KEPT
    assert during == ("a", 1)
    assert holder(server) == ("", 1)
    assert 1 < freed_at - start < 3  # retried with a growing pause, from 0.25 s


async def release_it(grant: Grant) -> None:
    """An orphan handler that hands the adopted grant back at once."""
    await grant.release()


def _unavailable() -> list[Exception]:
    return [Unavailable("503 Service Unavailable", status=503, reason="Injected")]


def _timeout() -> list[Exception]:
    return [TimeoutError("request timed out")]


def _conflicts() -> list[Exception]:
    # The release's write and, after a read-back showing the grant still ours, its second try.
    return [Conflict("stale resourceVersion", status=409), Conflict("again", status=409)]


@pytest.mark.parametrize("failure", [_unavailable, _timeout, _conflicts])
@pytest.mark.parametrize("on_orphan", [None, release_it], ids=["released", "handed-over"])
def test_an_adopted_orphan_whose_release_fails_is_freed_when_the_store_answers(
    on_orphan: OrphanHandler | None, failure: Callable[[], list[Exception]]
) -> None:
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")

    async def main() -> tuple[tuple[str, int], float]:
        a = lock(server, client, on_orphan=on_orphan)
        client.lose, client.fail_gets = 1, 1  # the claim (a create) lands, unconfirmed
        client.fail_replaces = failure()  # the adopted grant's release does not land
        assert await a.try_claim(TICK) == Skipped("uncertain", "")
        await asyncio.sleep(2)  # well before the grant expires (10 s)
        during = holder(server)
        await a.close()
        return during, max(at for at, _, _ in server.writes)

    start = server.clock.monotonic()
    during, freed_at = simulate(server.clock, main)
    assert client.fail_replaces == []
    assert during == ("", 1)  # freed, not left held until it expires
    assert freed_at - start < 1


def test_an_adopted_orphan_whose_release_never_lands_is_retried_until_it_expires() -> None:
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")

    async def main() -> tuple[int, int, int]:
        a = lock(server, client)
        client.lose, client.fail_gets = 1, 1
        client.fail_replaces = _unavailable() * 1000
        assert await a.try_claim(TICK) == Skipped("uncertain", "")
        await asyncio.sleep(5)
        before_expiry = client.requests["replace"]
        await asyncio.sleep(7)  # 12 s after the claim: expired by local time (10 s)
        at_expiry = client.requests["replace"]
        await asyncio.sleep(60)
        later = client.requests["replace"]
        await a.close()
        return before_expiry, at_expiry, later

    before_expiry, at_expiry, later = simulate(server.clock, main)
    assert before_expiry > 2  # the release, then retries
    assert later == at_expiry  # nothing to release once it expired
    assert holder(server) == ("a", 1)


def test_an_adopted_orphans_release_that_finds_another_holder_is_not_retried() -> None:
    server = FakeLeaseServer(FakeClock())
    client = LossyClient(server, "a")

    def taken_behind_the_view(identity: str, token: int) -> None:
        # Another replica's write that this replica's view has not seen yet.
        stored = copy.deepcopy(server.stored(NS, LEASE))
        assert stored is not None
        stored["spec"]["holderIdentity"], stored["spec"]["leaseTransitions"] = identity, token
        server.version += 1
        stored["metadata"]["resourceVersion"] = str(server.version)
        server.objects[(NS, LEASE)] = stored

    released: list[ReleaseResult] = []

    async def take_over(grant: Grant) -> None:
        taken_behind_the_view("b", grant.token + 1)
        released.append(await grant.release())  # a Conflict; read back: b holds it

    async def main() -> int:
        a = lock(server, client, on_orphan=take_over)
        client.lose, client.fail_gets = 1, 1
        assert await a.try_claim(TICK) == Skipped("uncertain", "")
        await asyncio.sleep(0.1)
        replaces = client.requests["replace"]
        await asyncio.sleep(30)
        await a.close()
        return client.requests["replace"] - replaces

    assert simulate(server.clock, main) == 0
    assert released == [ReleaseResult.NOT_OURS]
    assert holder(server) == ("b", 2)


def test_a_claim_whose_caller_stops_while_it_is_on_the_wire_is_handed_back_once_it_lands() -> None:
    server = FakeLeaseServer(FakeClock(), latency=lambda: 0.5)

    async def main() -> None:
        a = lock(server, server.client("a"))
        claiming = asyncio.ensure_future(a.try_claim(TICK))
        await asyncio.sleep(0.2)  # the create is on the wire
        claiming.cancel()
        try:
            await claiming
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the claim was not cancelled")
        await a.close()

    simulate(server.clock, main)
    assert holder(server) == ("", 1)


def test_held_by_other_is_another_holders_live_grant_and_taken_by_other_adds_the_tick() -> None:
    server = FakeLeaseServer(FakeClock())
    config = LockConfig(at_most_for=3)

    async def main() -> list[tuple[bool, bool, bool]]:
        a = lock(server, server.client("a"), config=config)
        b = lock(server, server.client("b"), config=config)
        later = TICK + timedelta(minutes=1)
        seen = [(b.held_by_other(), b.taken_by_other(TICK), a.held_by_other())]  # no Lease yet
        grant = await a.claim(TICK)
        assert grant is not None
        await asyncio.sleep(0)
        seen.append((b.held_by_other(), b.taken_by_other(later), a.held_by_other()))
        await asyncio.sleep(3.5)  # expired by local time, not released
        seen.append((b.held_by_other(), b.taken_by_other(TICK), b.taken_by_other(later)))
        await a.close()
        await b.close()
        return seen

    assert simulate(server.clock, main) == [
        (False, False, False),
        (True, True, False),  # b sees a's live grant; a does not see itself as another
        (False, True, False),  # expired: not held, but TICK is on record
    ]


def test_a_shard_lock_tells_another_replicas_live_grant_from_its_own_and_a_released_one() -> None:
    server = FakeLeaseServer(FakeClock())

    def shard(identity: str) -> ShardLock:
        return ShardLock(
            server.client(identity),
            server.cache(),
            namespace=NS,
            name=LEASE,
            config=shard_config(3),
            identity=identity,
            clock=server.clock,
        )

    async def main() -> list[tuple[bool, bool, bool]]:
        a, b = shard("a"), shard("b")
        grant = await a.try_claim(TICK)
        assert isinstance(grant, Grant)
        later = TICK + timedelta(seconds=1)
        async with a.use(grant):
            await asyncio.sleep(0)
            seen = [(b.held_by_other(), b.taken_by_other(later), a.held_by_other())]
            free = asyncio.ensure_future(b.wait_free(timeout=10))
            await asyncio.sleep(0.5)
        assert await free
        seen.append((b.held_by_other(), b.taken_by_other(later), b.taken_by_other(TICK)))
        await a.close()
        await b.close()
        return seen

    assert simulate(server.clock, main) == [(True, True, False), (False, False, True)]


@pytest.mark.parametrize("over_own", [True, False])
def test_a_job_guards_shard_rules_never_claim_over_its_own_live_grant(over_own: bool) -> None:
    """A shard holder claims the next instant over its own live grant (the runs of both go
    on under its holding); a `job=` guard's lock on its job's own shard Lease does not (a
    body still going keeps the next tick from it)."""
    server = FakeLeaseServer(FakeClock())
    client = FakeClient(server, "a")

    async def main() -> tuple[Grant | Skipped, Grant | Skipped, bool]:
        a = TickLock(
            client,
            server.cache(),
            namespace=NS,
            name=LEASE,
            config=CONFIG,
            identity="a",
            clock=server.clock,
            rules=ShardRules(None, over_own=over_own),
        )
        first = await a.try_claim(TICK)
        second = await a.try_claim(TICK + timedelta(seconds=1))
        await asyncio.sleep(0)
        still = isinstance(first, Grant) and first.held
        await a.close()
        return first, second, still

    first, second, still = simulate(server.clock, main)
    assert isinstance(first, Grant)
    if over_own:
        assert isinstance(second, Grant) and second.token == first.token + 1 and still
    else:
        assert second == Skipped("live_grant", "a")
        assert still
