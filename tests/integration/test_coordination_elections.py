"""Leader election against the real API server: one leader, silent standbys, handover on
release, stepping down when the Lease is taken, and contending again afterwards."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import pytest
from kubernetes.client import ApiClient
from lease_helpers import lease_obj, take_over

from leasecron.coordination import BackgroundLoop, Elector, SyncElector, Term, lease_informer
from leasecron.kube.clients import Kube
from leasecron.kube.watches import Informer
from leasecron.models.configs import ElectionConfig
from leasecron.models.leases import parse_lease

pytestmark = pytest.mark.integration
T = TypeVar("T")
LEASE = "leasecron-leader-billing"
FAST = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)
WAIT = 10.0


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


class Candidate:
    def __init__(self, api: ApiClient, namespace: str, identity: str, **kw: Any) -> None:
        self.kube = Kube(api, max_workers=4)
        self.informer: Informer = lease_informer(self.kube, namespace=namespace)
        self.events: list[tuple[str, Any]] = []
        self.elector = Elector(
            self.kube,
            self.informer,
            namespace=namespace,
            name=LEASE,
            config=FAST,
            identity=identity,
            on_started_leading=lambda term: self.events.append(("started", term.token)),
            on_stopped_leading=lambda term: self.events.append(("stopped", term.token)),
            on_new_leader=lambda who: self.events.append(("leader", who)),
            **kw,
        )

    async def record(self) -> Any:
        def present() -> bool:
            return self.informer.get(self.elector.namespace, LEASE) is not None

        await self.informer.wait_for(present, timeout=WAIT)
        return parse_lease(self.informer.get(self.elector.namespace, LEASE))


@asynccontextmanager
async def candidates(
    api: ApiClient, namespace: str, count: int, **kw: Any
) -> AsyncIterator[list[Candidate]]:
    group = [Candidate(api, namespace, f"c{i}", **kw) for i in range(count)]
    try:
        for candidate in group:
            await candidate.informer.start()
        yield group
    finally:
        for candidate in group:
            await candidate.elector.stop(release=False)
            await candidate.informer.stop()


async def first_leader(group: list[Candidate]) -> tuple[Candidate, Term]:
    waits = {asyncio.ensure_future(c.elector.wait_leading(timeout=WAIT)): c for c in group}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    task = done.pop()
    term = task.result()
    assert term is not None
    return waits[task], term


def test_one_candidate_leads_and_the_standby_sends_nothing_while_it_renews(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> None:
        async with candidates(kube_api, namespace, 2) as group:
            for candidate in group:
                candidate.elector.start()
            leader, term = await first_leader(group)
            standby = next(c for c in group if c is not leader)
            assert await standby.informer.wait_for(
                lambda: standby.elector.leader == leader.elector.identity, timeout=WAIT
            )
            before = standby.kube.request_count

            def renewed_since(last: Any) -> Callable[[], bool]:
                return lambda: (
                    parse_lease(standby.informer.get(namespace, LEASE)).renew_time != last
                )

            renewals = 0
            last = (await standby.record()).renew_time
            while renewals < 4:  # four renewals by the leader, seen through the watch
                assert await standby.informer.wait_for(renewed_since(last), timeout=WAIT)
                last = (await standby.record()).renew_time
                renewals += 1
            assert standby.kube.request_count == before
            assert not standby.elector.is_leader
            assert {("started", term.token), ("leader", term.identity)} <= set(leader.events)
            assert ("leader", leader.elector.identity) in standby.events

    run(scenario)


def test_stop_with_release_hands_over_to_the_standby_within_one_second(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[float, int, int]:
        async with candidates(kube_api, namespace, 2) as group:
            for candidate in group:
                candidate.elector.start()
            leader, term = await first_leader(group)
            standby = next(c for c in group if c is not leader)
            began = time.monotonic()
            await leader.elector.stop(release=True)
            next_term = await standby.elector.wait_leading(timeout=WAIT)
            assert next_term is not None
            assert leader.events[-1] == ("stopped", term.token)
            assert term.lost.is_set()
            return time.monotonic() - began, term.token, next_term.token

    handover, first, second = run(scenario)
    assert handover < 1.0
    assert second == first + 1


def test_the_context_manager_form_waits_for_leadership_and_releases_on_exit(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> None:
        async with candidates(kube_api, namespace, 1) as (one,):
            async with one.elector.leading() as term:
                assert one.elector.is_leader
                term.assert_held()
                assert (await one.record()).holder == "c0"
            assert term.lost.is_set()
        spec = lease_obj(kube_api, namespace, LEASE)["spec"]
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)

    run(scenario)


def test_a_leader_whose_lease_is_taken_steps_down_at_once_and_contends_again(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> None:
        async with candidates(kube_api, namespace, 1) as (one,):
            one.elector.start()
            term = await one.elector.wait_leading(timeout=WAIT)
            assert term is not None
            take_over(kube_api, namespace, LEASE, holder="intruder", transitions=term.token + 5)
            assert await term.lost.wait_async(WAIT)
            assert not one.elector.is_leader
            assert ("stopped", term.token) in one.events
            # The intruder never renews: after its lease duration the elector leads again.
            again = await one.elector.wait_leading(timeout=WAIT)
            assert again is not None
            assert again.token == term.token + 6

    run(scenario)


def test_callbacks_that_raise_run_and_do_not_stop_the_elector_renewing(
    kube_api: ApiClient, namespace: str
) -> None:
    calls: list[tuple[str, object]] = []

    def boom(what: str) -> Callable[[object], None]:
        def callback(arg: object) -> None:
            calls.append((what, arg.token if isinstance(arg, Term) else arg))
            raise RuntimeError(f"{what} bug")

        return callback

    async def failing(term: Term) -> None:
        calls.append(("started", term.token))
        raise RuntimeError("handler bug")

    async def scenario() -> tuple[int, list[datetime]]:
        kube = Kube(kube_api, max_workers=4)
        informer = lease_informer(kube, namespace=namespace)
        await informer.start()
        elector = Elector(
            kube,
            informer,
            namespace=namespace,
            name=LEASE,
            config=FAST,
            identity="c0",
            on_started_leading=failing,
            on_stopped_leading=boom("stopped"),
            on_new_leader=boom("leader"),
        )

        def renewed() -> datetime | None:
            return parse_lease(informer.get(namespace, LEASE)).renew_time

        try:
            async with elector.leading() as term:
                ran = await informer.wait_for(
                    lambda: {("started", term.token), ("leader", "c0")} <= set(calls),
                    timeout=WAIT,
                )
                assert ran, calls
                # Both callbacks have raised; the elector keeps renewing (every retryPeriod,
                # 0.5 s): wait for two more renewals, still leading the same term.
                renewals = [renewed()]
                for _ in range(2):
                    later = await informer.wait_for(
                        lambda: (renewed() or datetime.min) > (renewals[-1] or datetime.min),
                        timeout=WAIT,
                    )
                    assert later, "the elector stopped renewing after its callbacks raised"
                    renewals.append(renewed())
                assert elector.is_leader and not term.lost.is_set()
            assert term.lost.is_set()
        finally:
            await informer.stop()
        return term.token, [r for r in renewals if r is not None]

    token, renewals = run(scenario)
    assert len(renewals) == 3 and renewals == sorted(set(renewals))
    assert calls.count(("started", token)) == 1
    assert ("stopped", token) in calls  # it ran (and raised) when the term ended
    assert calls.count(("leader", "c0")) == 1
    assert lease_obj(kube_api, namespace, LEASE)["spec"]["holderIdentity"] == ""


def test_the_sync_front_end_leads_from_a_plain_thread_and_releases_on_exit(
    kube_api: ApiClient, namespace: str
) -> None:
    tokens: list[int] = []

    with BackgroundLoop() as loop:

        async def build() -> SyncElector:
            kube = Kube(kube_api, max_workers=2)
            informer = lease_informer(kube, namespace=namespace)
            await informer.start()
            elector = Elector(
                kube, informer, namespace=namespace, name=LEASE, config=FAST, identity="sync"
            )
            return SyncElector(elector, loop)

        elector = loop.run(build())

        def app_thread() -> None:
            with elector.leading() as term:
                assert elector.is_leader
                tokens.append(term.token)
            assert term.lost.is_set()

        thread = threading.Thread(target=app_thread)
        thread.start()
        thread.join(WAIT)
        assert not thread.is_alive()
    assert tokens == [0]
    spec = lease_obj(kube_api, namespace, LEASE)["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
