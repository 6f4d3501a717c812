"""The group record against the real API server: a shard Lease deleted and created again
continues its tokens above their last value (no JobRuns involved), a claim above the ceiling
raises the recorded ceiling first, a change of shard count neither claims an instant twice nor
lets a token go down, a corrupt record is logged with its value and never crashes a replica,
replicas configured with different counts follow the record, and a job moved to a shard
Lease of its own is claimed there only, after the last instant claimed for it elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
import structlog
from kubernetes.client import ApiClient, CoordinationV1Api
from lease_helpers import lease_obj

from leasecron.coordination import (
    Grant,
    GroupRecord,
    Skipped,
    change_shard_count,
    lease_informer,
)
from leasecron.coordination.shards import ShardLock, shard_config
from leasecron.kube.clients import Kube
from leasecron.kube.watches import Informer
from leasecron.models.groups import (
    ANNOTATION_RETIRED,
    ANNOTATION_SHARDS,
    ANNOTATION_TOKEN_CEILING,
    GroupState,
    group_lease_name,
    own_ref,
    parse_group,
)
from leasecron.models.leases import lease_annotations
from leasecron.models.shards import ANNOTATION_MOVED, own_lease_name, shard_lease_name, shard_of

pytestmark = pytest.mark.integration
T = TypeVar("T")
GROUP = "billing"
RECORD = group_lease_name(GROUP)
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
WAIT = 10.0


def tick(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


@dataclass
class Replica:
    kube: Kube
    informer: Informer
    namespace: str
    identity: str
    group: GroupRecord

    def shard(self, index: int = 0, *, shards: int | None = None) -> ShardLock:
        count = shards or self.group.state.shards
        return ShardLock(
            self.kube,
            self.informer,
            namespace=self.namespace,
            name=shard_lease_name(GROUP, index, shards=count),
            identity=self.identity,
            config=shard_config(2),
            group=self.group,
        )

    async def sees(self, predicate: Callable[[], bool]) -> None:
        assert await self.informer.wait_for(predicate, timeout=WAIT)


@asynccontextmanager
async def replicas(
    api: ApiClient, namespace: str, *configured: int
) -> AsyncIterator[list[Replica]]:
    started: list[Replica] = []
    try:
        for i, shards in enumerate(configured):
            kube = Kube(api, max_workers=4)
            informer = lease_informer(kube, namespace=namespace)
            await informer.start()
            identity = f"replica-{i}"
            group = GroupRecord(
                kube,
                informer,
                namespace=namespace,
                group=GROUP,
                identity=identity,
                configured_shards=shards,
            )
            started.append(Replica(kube, informer, namespace, identity, group))
            await group.start()
        yield started
    finally:
        for replica in started:
            replica.group.close()
            await replica.informer.stop()
            await replica.kube.close()


async def claimed(lock: ShardLock, instant: datetime) -> Grant:
    result = await lock.try_claim(instant)
    assert isinstance(result, Grant), result
    await lock.release(result)
    return result


def recorded(api: ApiClient, namespace: str) -> GroupState:
    return parse_group(lease_annotations(lease_obj(api, namespace, RECORD)))


def annotate(api: ApiClient, namespace: str, name: str, changes: dict[str, str]) -> None:
    """An administrator's `kubectl annotate --overwrite lease`."""
    CoordinationV1Api(api).patch_namespaced_lease(
        name, namespace, {"metadata": {"annotations": changes}}
    )


def test_a_shard_lease_deleted_and_created_again_continues_its_tokens_above_the_last(
    kube_api: ApiClient, namespace: str
) -> None:
    name = shard_lease_name(GROUP, 0, shards=4)

    async def scenario() -> tuple[list[int], int]:
        async with replicas(kube_api, namespace, 4, 4) as (a, b):
            tokens = [(await claimed(a.shard(), tick(s))).token for s in range(3)]
            CoordinationV1Api(kube_api).delete_namespaced_lease(name, namespace)
            await b.sees(lambda: b.informer.get(namespace, name) is None)
            return tokens, (await claimed(b.shard(), tick(3))).token

    tokens, after = run(scenario)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert after > tokens[-1]
    assert after <= recorded(kube_api, namespace).ceiling


def test_a_claim_above_the_ceiling_raises_the_recorded_ceiling_first(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[GroupState, int, Grant, int]:
        async with replicas(kube_api, namespace, 4) as (a,):
            before = recorded(kube_api, namespace)
            first = await claimed(a.shard(), tick(0))
            annotate(kube_api, namespace, RECORD, {ANNOTATION_TOKEN_CEILING: str(first.token)})
            await a.sees(lambda: a.group.state.ceiling == first.token)
            lock = a.shard()
            second = await lock.try_claim(tick(1))
            assert isinstance(second, Grant), second
            seen = lock.lease.observe()
            assert seen is not None and seen.resource_version is not None
            await lock.release(second)
            return before, first.token, second, int(seen.resource_version)

    before, first, second, claim_revision = run(scenario)
    assert before == GroupState(shards=4)  # created by the first replica, no ceiling yet
    assert (first, second.token) == (1, 2)
    record = lease_obj(kube_api, namespace, RECORD)
    assert parse_group(lease_annotations(record)).ceiling >= second.token
    # raised before the claim was written (etcd revisions grow across all objects)
    assert int(record["metadata"]["resourceVersion"]) < claim_revision


def test_a_count_change_claims_no_instant_twice_and_lets_no_token_go_down(
    kube_api: ApiClient, namespace: str
) -> None:
    old_names = [shard_lease_name(GROUP, i, shards=2) for i in range(2)]
    lines: list[str] = []

    async def scenario() -> tuple[list[Grant], Grant | Skipped, Grant | Skipped, Grant]:
        async with replicas(kube_api, namespace, 2, 2) as (a, b):
            old_locks = [a.shard(0), a.shard(1)]
            old = [await claimed(old_locks[0], tick(s)) for s in range(3)]
            old.append(await claimed(old_locks[1], tick(1)))
            await change_shard_count(
                b.kube, namespace=namespace, group=GROUP, shards=3, report=lines.append
            )
            await a.sees(lambda: a.group.state.shards == 3)
            await b.sees(lambda: b.group.state.shards == 3)
            on_old = await old_locks[0].try_claim(tick(3))
            taken = await a.shard(0).try_claim(tick(2))
            new = await claimed(b.shard(0), tick(3))
            return old, on_old, taken, new

    old, on_old, taken, new = run(scenario)
    assert on_old == Skipped("retired", "")
    assert taken == Skipped("taken", "")
    assert new.token > max(grant.token for grant in old)
    state = recorded(kube_api, namespace)
    assert (state.shards, state.floor_tick) == (3, tick(2))
    for name in old_names:
        assert ANNOTATION_RETIRED in lease_annotations(lease_obj(kube_api, namespace, name))
    assert any(line.startswith("4.") for line in lines)


def test_a_corrupt_group_record_is_logged_with_its_value_and_crashes_nothing(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[Grant, Grant | Skipped, GroupState]:
        async with replicas(kube_api, namespace, 4) as (a,):
            within = await claimed(a.shard(0), tick(0))
            annotate(kube_api, namespace, RECORD, {ANNOTATION_SHARDS: "many"})
            await a.sees(lambda: not a.group.readable)
            # the same Lease is within the ceiling; a new shard Lease would need a raise
            within = await claimed(a.shard(0), tick(1))
            needs_raise = await a.shard(1).try_claim(tick(1))
            return within, needs_raise, a.group.state

    with structlog.testing.capture_logs() as logs:
        within, needs_raise, state = run(scenario)
    assert within.token == 2
    assert needs_raise == Skipped("group_record_unreadable", "")
    assert state.shards == 4
    errors = [e for e in logs if e["log_level"] == "error" and "group record" in e["event"]]
    assert len(errors) == 1 and "'many'" in errors[0]["problem"]
    annotations = lease_annotations(lease_obj(kube_api, namespace, RECORD))
    assert annotations[ANNOTATION_SHARDS] == "many"  # never overwritten


def test_replicas_configured_with_different_counts_both_follow_the_record(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[int, int, Grant | Skipped]:
        with structlog.testing.capture_logs() as logs:
            async with replicas(kube_api, namespace, 4, 8) as (a, b):
                await claimed(a.shard(0), tick(0))
                second = await b.shard(0).try_claim(tick(0))
                warned = [e for e in logs if e.get("recorded_shards") == 4]
                assert warned and warned[0]["configured_shards"] == 8
                return a.group.state.shards, b.group.state.shards, second

    a_shards, b_shards, second = run(scenario)
    assert (a_shards, b_shards) == (4, 4)
    assert isinstance(second, Skipped) and second.reason == "taken"  # the same shard Lease


def test_a_job_moved_to_its_own_lease_is_claimed_only_there_after_its_last_instant(
    kube_api: ApiClient, namespace: str
) -> None:
    """The move marks the job on its shard Lease with the instant that Lease claimed last,
    makes the job's own Lease at that instant and above its tokens, then lists the job in
    the record: a claim on the shard Lease after it runs nothing of the job, the own Lease
    takes the job's next instant (not the one claimed before) with a higher token, and a
    count change leaves the job where it is."""
    own_name = own_lease_name(GROUP, "report")

    async def scenario() -> dict[str, Any]:
        async with replicas(kube_api, namespace, 1, 1) as (a, b):
            before = [await claimed(a.shard(0), tick(s)) for s in range(2)]
            state = await b.group.move_job("report")
            again = await a.group.move_job("report")
            await a.sees(lambda: "report" in a.group.state.own)
            own = ShardLock(
                a.kube,
                a.informer,
                namespace=namespace,
                name=own_name,
                identity=a.identity,
                config=shard_config(2),
                group=a.group,
            )
            old_instant = await own.try_claim(tick(1))
            on_own = await claimed(own, tick(2))
            on_shard = await claimed(b.shard(0), tick(2))
            await change_shard_count(b.kube, namespace=namespace, group=GROUP, shards=4)
            await a.sees(lambda: a.group.state.shards == 4)
            return {
                "before": before,
                "state": state,
                "again": again,
                "old": old_instant,
                "own": on_own,
                "shard": on_shard,
                "after": a.group.state,
            }

    seen = run(scenario)
    assert "report" in seen["state"].own and seen["again"].own == seen["state"].own
    marks = lease_annotations(lease_obj(kube_api, namespace, shard_lease_name(GROUP, 0, shards=1)))
    assert marks[ANNOTATION_MOVED + "report"] == "2026-01-01T12:00:01Z"
    assert seen["old"] == Skipped("taken", "")
    assert seen["own"].token > max(g.token for g in seen["before"])
    assert seen["shard"].moved == {"report"} and seen["own"].moved == set()
    assert seen["after"].ref(GROUP, "report") == own_ref(GROUP, "report")
    assert recorded(kube_api, namespace).own == {"report"}
    labels = lease_obj(kube_api, namespace, own_name)["metadata"]["labels"]
    assert (labels["leasecron.dev/role"], labels["leasecron.dev/job"]) == ("shard", "report")


def test_two_replicas_moving_one_job_at_once_both_find_it_moved_once(
    kube_api: ApiClient, namespace: str
) -> None:
    async def scenario() -> tuple[GroupState, GroupState]:
        async with replicas(kube_api, namespace, 4, 4) as (a, b):
            await claimed(a.shard(shard_of("x", shards=4)), tick(0))
            first, second = await asyncio.gather(a.group.move_job("x"), b.group.move_job("x"))
            return first, second

    first, second = run(scenario)
    assert first.own == second.own == {"x"} == recorded(kube_api, namespace).own
    own = lease_obj(kube_api, namespace, own_lease_name(GROUP, "x"))
    assert lease_annotations(own)["leasecron.dev/tick"] == "2026-01-01T12:00:00Z"
