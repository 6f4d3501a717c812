"""Once-per-tick claims against the real API server: one conditional write per claim, silence
from replicas that see the tick taken, release and atLeastFor, keep-alive and lost grants."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from kubernetes.client import ApiClient
from lease_helpers import lease_obj, take_over

from leasecron.coordination import (
    BackgroundLoop,
    Grant,
    LostLockError,
    SyncTickLock,
    TickLock,
    lease_informer,
)
from leasecron.kube.clients import Kube
from leasecron.kube.errors import NotFound
from leasecron.kube.leases import LeaseStore
from leasecron.kube.transports import Request, Send
from leasecron.kube.watches import Informer
from leasecron.models.clocks import FakeClock
from leasecron.models.configs import LockConfig
from leasecron.models.leases import LeaseRecord, lease_body, parse_lease
from leasecron.models.names import ANNOTATION_TICK, LABEL_ROLE
from leasecron.models.vocabulary import LEGACY_GUARD

pytestmark = pytest.mark.integration
T = TypeVar("T")
LEASE = "leasecron-job-report"
TICK = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SHORT = LockConfig(at_most_for=2)
WAIT = 10.0


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


@dataclass
class Replica:
    kube: Kube
    informer: Informer
    identity: str

    def lock(self, namespace: str, config: LockConfig = SHORT, **kw: Any) -> TickLock:
        return TickLock(
            self.kube,
            self.informer,
            namespace=namespace,
            name=LEASE,
            config=config,
            identity=self.identity,
            **kw,
        )

    async def sees(self, namespace: str, predicate: Callable[[dict[str, Any]], bool]) -> bool:
        def check() -> bool:
            obj = self.informer.get(namespace, LEASE)
            return obj is not None and predicate(obj)

        return await self.informer.wait_for(check, timeout=WAIT)


@asynccontextmanager
async def replicas(api: ApiClient, namespace: str, count: int) -> AsyncIterator[list[Replica]]:
    started: list[Replica] = []
    try:
        for i in range(count):
            kube = Kube(api, max_workers=4)
            informer = lease_informer(kube, namespace=namespace)
            await informer.start()
            started.append(Replica(kube, informer, f"replica-{i}"))
        yield started
    finally:
        for replica in started:
            await replica.informer.stop()


def test_a_claim_writes_the_lease_like_client_go_with_token_and_tick(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> Grant | None:
        async with replicas(kube_api, namespace, 1) as (one,):
            return await one.lock(namespace).claim(TICK)

    grant = run(scenario)
    assert grant is not None
    assert (grant.token, grant.tick, grant.holder) == (1, TICK, "replica-0")
    obj = lease_obj(kube_api, namespace, LEASE)
    assert obj["spec"]["holderIdentity"] == "replica-0"
    assert obj["spec"]["leaseDurationSeconds"] == 2
    assert obj["spec"]["leaseTransitions"] == 1
    assert obj["metadata"]["annotations"][ANNOTATION_TICK] == "2026-01-01T12:00:00Z"
    assert obj["metadata"]["labels"]["leasecron.dev/role"] == "shard"


def test_a_tick_lock_continues_a_lease_an_earlier_version_labelled_guard(
    kube_api: ApiClient, namespace: str
) -> None:
    """Earlier versions labelled a tick lock's Lease `guard`: the process's view still holds
    it (its tick is taken, its token continued), and the next claim labels it `shard`."""
    now = datetime.now(UTC)  # released by its holder: free to claim after TICK
    record = LeaseRecord(name=LEASE, namespace=namespace, holder="", lease_duration_s=2)
    record = replace(record, acquire_time=now, renew_time=now, transitions=5, tick=TICK)
    body = lease_body(record, labels={LABEL_ROLE: LEGACY_GUARD})
    kube = Kube(kube_api, max_workers=1)
    kube.request_sync("POST", LeaseStore(kube).collection_path(namespace=namespace), body=body)

    async def scenario() -> tuple[Grant | None, Grant | None]:
        async with replicas(kube_api, namespace, 1) as (one,):
            assert await one.sees(namespace, lambda obj: True)
            taken = await one.lock(namespace).claim(TICK)
            return taken, await one.lock(namespace).claim(TICK + timedelta(minutes=1))

    taken, grant = run(scenario)
    assert taken is None
    assert grant is not None and grant.token == 6
    assert lease_obj(kube_api, namespace, LEASE)["metadata"]["labels"][LABEL_ROLE] == "shard"


def _spec_or_none(api: ApiClient, namespace: str) -> dict[str, Any] | None:
    try:
        return dict(lease_obj(api, namespace, LEASE)["spec"])
    except NotFound:
        return None


def test_a_claim_whose_caller_stops_while_it_is_on_the_wire_is_handed_back_once_it_lands(
    kube_api: ApiClient, namespace: str
) -> None:
    """A replica shutting down mid-claim does not leave the Lease taken by an identity that
    will neither run nor renew it (it would block every later tick until it expired)."""

    async def scenario() -> None:
        async with replicas(kube_api, namespace, 1) as (one,):
            loop = asyncio.get_running_loop()
            on_wire = asyncio.Event()

            def slow_lease_writes(request: Request, send: Send) -> Any:
                if request.write and request.resource.startswith("leases"):
                    loop.call_soon_threadsafe(on_wire.set)
                    time.sleep(1.0)
                return send()

            one.kube.wrap_transport(slow_lease_writes)
            lock = one.lock(namespace, LockConfig(at_most_for=60))
            claim = asyncio.ensure_future(lock.try_claim(TICK))
            await on_wire.wait()
            claim.cancel()
            with pytest.raises(asyncio.CancelledError):
                await claim
            await lock.close()

    run(scenario)
    deadline = time.monotonic() + WAIT
    while (spec := _spec_or_none(kube_api, namespace)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert spec is not None
    assert spec["leaseTransitions"] == 1  # the claim landed
    assert spec.get("holderIdentity", "") == ""  # and was handed back


def test_a_replica_that_sees_the_tick_taken_sends_no_request(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> None:
        async with replicas(kube_api, namespace, 2) as (first, second):
            grant = await first.lock(namespace).claim(TICK)
            assert grant is not None
            assert await second.sees(namespace, lambda o: o["spec"]["holderIdentity"] != "")
            before = second.kube.request_count
            assert await second.lock(namespace).claim(TICK, stagger=0.05) is None
            assert await second.lock(namespace).claim(TICK + timedelta(minutes=1)) is None
            assert second.kube.request_count == before  # taken, then live_grant: both silent

    run(scenario)


def test_a_released_lease_is_claimed_for_the_next_tick_with_the_next_token(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> list[int]:
        async with replicas(kube_api, namespace, 2) as (first, second):
            grant = await first.lock(namespace).claim(TICK)
            assert grant is not None
            await grant.release()
            assert await second.sees(namespace, lambda o: o["spec"]["holderIdentity"] == "")
            spec = lease_obj(kube_api, namespace, LEASE)["spec"]
            assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
            nxt = await second.lock(namespace).claim(TICK + timedelta(minutes=1))
            assert nxt is not None
            with pytest.raises(LostLockError):
                grant.assert_held()
            return [grant.token, nxt.token]

    assert run(scenario) == [1, 2]


def test_two_replicas_racing_without_a_cache_get_exactly_one_grant(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> list[Grant | None]:
        kubes = [Kube(kube_api, max_workers=2) for _ in range(4)]
        locks = [
            TickLock(k, None, namespace=namespace, name=LEASE, config=SHORT, identity=f"r{i}")
            for i, k in enumerate(kubes)
        ]
        return list(await asyncio.gather(*(lock.claim(TICK) for lock in locks)))

    grants = run(scenario)
    assert sum(g is not None for g in grants) == 1


def test_release_within_at_least_for_keeps_the_holder_until_it_has_passed(
    kube_api: ApiClient, namespace: str
) -> None:
    config = LockConfig(at_most_for=3, at_least_for=1.5)

    async def scenario() -> None:
        async with replicas(kube_api, namespace, 1) as (one,):
            lock = one.lock(namespace, config)
            grant = await lock.claim(TICK)
            assert grant is not None
            await grant.release()
            spec = lease_obj(kube_api, namespace, LEASE)["spec"]
            assert spec["holderIdentity"] == "replica-0"
            assert spec["leaseDurationSeconds"] == 2  # 1.5 s rounded up
            assert await one.sees(namespace, lambda o: o["spec"]["holderIdentity"] == "")
            await lock.close()

    run(scenario)


def test_keep_alive_renews_and_a_takeover_sets_lost_and_calls_listeners(
    kube_api: ApiClient, namespace: str
) -> None:
    calls: list[str] = []

    def bad_listener(grant: Grant, reason: str) -> None:
        calls.append(reason)
        raise RuntimeError("listener bug")

    async def scenario() -> None:
        async with replicas(kube_api, namespace, 1) as (one,):
            grant = await one.lock(namespace, LockConfig(at_most_for=1.2)).claim(TICK)
            assert grant is not None
            async with grant.keep_alive(listeners=[bad_listener]) as keep_alive:
                first = parse_lease(lease_obj(kube_api, namespace, LEASE)).renew_time
                assert await one.sees(namespace, lambda o: parse_lease(o).renew_time != first)
                assert grant.held
                take_over(kube_api, namespace, LEASE, holder="intruder", transitions=9)
                assert await grant.lost.wait_async(WAIT)
                assert keep_alive.renewals >= 1
                await asyncio.sleep(0)  # let the listener task run
                for _ in range(50):
                    if calls:
                        break
                    await asyncio.sleep(0.01)
            with pytest.raises(LostLockError, match="intruder"):
                grant.assert_held()
            await grant.release()  # never writes over the intruder
        spec = lease_obj(kube_api, namespace, LEASE)["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("intruder", 9)

    run(scenario)
    assert len(calls) == 1 and "intruder" in calls[0]


def test_a_grant_expires_by_local_time_without_renewal(kube_api: ApiClient, namespace: str) -> None:
    async def scenario() -> None:
        async with replicas(kube_api, namespace, 1) as (one,):
            clock = FakeClock()
            grant = await one.lock(namespace, clock=clock).claim(TICK)
            assert grant is not None
            clock.advance(1.9)
            grant.assert_held()
            clock.advance(0.1)
            with pytest.raises(LostLockError, match="expired"):
                grant.assert_held()
            assert grant.lost.is_set()
            before = one.kube.request_count
            assert not await grant.renew()
            assert one.kube.request_count == before

    run(scenario)


def test_the_sync_front_end_claims_and_releases_from_a_plain_thread(
    kube_api: ApiClient, namespace: str
) -> None:
    results: list[int] = []

    def app_thread(lock: SyncTickLock) -> None:
        grant = lock.claim(TICK)
        assert grant is not None
        with grant.kept_alive():
            grant.assert_held()
            results.append(grant.token)
        assert lock.claim(TICK) is None

    with BackgroundLoop() as loop:

        async def build() -> SyncTickLock:
            informer = lease_informer(Kube(kube_api, max_workers=2), namespace=namespace)
            await informer.start()
            kube = Kube(kube_api, max_workers=2)
            lock = TickLock(
                kube, informer, namespace=namespace, name=LEASE, config=SHORT, identity="t"
            )
            return SyncTickLock(lock, loop)

        lock = loop.run(build())
        thread = threading.Thread(target=app_thread, args=(lock,))
        thread.start()
        thread.join(WAIT)
    assert results == [1]
    assert lease_obj(kube_api, namespace, LEASE)["spec"]["holderIdentity"] == ""
