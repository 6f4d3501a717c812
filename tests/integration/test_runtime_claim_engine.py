"""The one claim engine against a real API server (docs/design.md, "The claim engine"): every
once-per-tick job is claimed through its group's shard Leases whatever its lock settings, the
shard count is the group record's, a job's token never decreases (shard Lease deleted, job
deleted and applied again, records still queued), and each job keeps its own deadline."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from lease_helpers import lease_obj

from leasecron import JobContext, Scheduler
from leasecron.coordination.groups import _mark_moved, _own_lease
from leasecron.coordination.resourcelocks import ROLE_SHARD, LeaseLock
from leasecron.kube.clients import Kube
from leasecron.models.clocks import SYSTEM_CLOCK
from leasecron.models.groups import (
    ANNOTATION_SHARDS,
    TOKEN_BLOCK,
    group_lease_name,
    recorded_state,
)
from leasecron.models.leases import LeaseRecord, lease_body, parse_lease
from leasecron.models.names import (
    ANNOTATION_CLAIMER,
    GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    SCHEDULEDJOB_PLURAL,
    VERSION,
    job_lease_name,
    jobrun_name,
)
from leasecron.models.shards import own_lease_name, shard_lease_name, shard_of
from leasecron.models.vocabulary import LEGACY_JOB
from leasecron.runtime import Tuning
from leasecron.testing import poll
from leasecron.testing.faults import Fault, fault_plan
from leasecron.testing.handlers import CapturingHandler, scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)


def _objects(api: Any) -> Any:
    return client.CustomObjectsApi(api)


def _create(api: Any, namespace: str, name: str, **spec: Any) -> None:
    spec.setdefault("schedule", "@every 1s")
    spec.setdefault("handler", "work")
    manifest = scheduled_job(name, **spec)
    _objects(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
    )


def _delete(api: Any, namespace: str, name: str) -> None:
    _objects(api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, name
    )


def _schedulers(kube: Kube, namespace: str, *counts: int) -> list[tuple[Scheduler, Any]]:
    pairs = []
    for count in counts:
        scheduler = Scheduler(
            namespace=namespace, kube=kube, tuning=FAST, grace_period=5, shards=count
        )
        capture = CapturingHandler()
        scheduler.register("work", capture)
        pairs.append((scheduler, capture))
    return pairs


def _contexts(pairs: list[tuple[Scheduler, Any]], job: str | None = None) -> list[JobContext]:
    found = [ctx for _, c in pairs for ctx in list(c.contexts) if job is None or ctx.job == job]
    return sorted(found, key=lambda ctx: (ctx.job, ctx.tick))


def _assert_once_with_growing_tokens(contexts: list[JobContext]) -> None:
    per_tick = Counter((ctx.job, ctx.tick) for ctx in contexts)
    twice = sorted(k for k, n in per_tick.items() if n > 1)
    assert not twice, f"ticks run more than once: {twice}"
    for job, runs in itertools.groupby(contexts, key=lambda ctx: ctx.job):
        tokens = [ctx.token for ctx in runs]
        assert all(t is not None for t in tokens), job
        dropped = [(a, b) for a, b in itertools.pairwise(tokens) if b <= a]  # type: ignore[operator]
        assert not dropped, f"{job}: the token did not grow: {dropped}"


def test_every_once_per_tick_job_is_claimed_through_shards_whatever_its_lock_settings(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """Default settings (keepAlive: true), keepAlive: false, atLeastFor and RunLocally jobs
    all run once per tick under shard claims: one token per shard and instant."""
    pairs = _schedulers(kube, namespace, 2, 2)
    _create(kube_api, namespace, "defaults")
    _create(kube_api, namespace, "short", lock={"keepAlive": False, "atMostFor": "5s"})
    _create(kube_api, namespace, "held", lock={"atLeastFor": "1s", "atMostFor": "5s"})
    _create(kube_api, namespace, "local", onStoreUnavailable="RunLocally")
    for scheduler, _ in pairs:
        scheduler.start()
    try:
        jobs = ("defaults", "short", "held", "local")
        poll(
            lambda: all(len(_contexts(pairs, j)) >= 4 for j in jobs),
            timeout=60,
            what="4 runs of every job",
        )
    finally:
        for scheduler, _ in pairs:
            scheduler.stop()
    contexts = _contexts(pairs)
    _assert_once_with_growing_tokens(contexts)
    leases = client.CoordinationV1Api(kube_api).list_namespaced_lease(namespace).items
    names = {lease.metadata.name for lease in leases}
    assert not any(n.startswith("leasecron-job-") for n in names), names
    for ctx in contexts:
        assert shard_lease_name("default", shard_of(ctx.job, shards=2), shards=2) in names
    instants: dict[tuple[int, Any], set[int | None]] = {}
    for ctx in contexts:
        instants.setdefault((shard_of(ctx.job, shards=2), ctx.tick), set()).add(ctx.token)
    assert all(len(tokens) == 1 for tokens in instants.values()), instants


def test_replicas_configured_with_different_shard_counts_follow_the_group_record(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    first = _schedulers(kube, namespace, 3)
    first[0][0].start()
    try:
        poll(
            lambda: _group_shards(kube_api, namespace) == "3",
            timeout=30,
            what="the group record with 3 shards",
        )
        later = _schedulers(kube, namespace, 7)
        for name in ("a", "b", "c", "d"):
            _create(kube_api, namespace, name)
        later[0][0].start()
        pairs = first + later
        try:
            poll(
                lambda: all(len(_contexts(pairs, j)) >= 5 for j in "abcd"),
                timeout=60,
                what="5 runs of every job",
            )
        finally:
            later[0][0].stop()
    finally:
        first[0][0].stop()
    _assert_once_with_growing_tokens(_contexts(pairs))
    names = {
        lease.metadata.name
        for lease in client.CoordinationV1Api(kube_api).list_namespaced_lease(namespace).items
    }
    assert not [n for n in names if n.startswith("leasecron-shard-default-7-")], names
    assert _contexts(later), "the replica configured with 7 shards ran nothing"


def _group_shards(api: Any, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(
            group_lease_name("default"), namespace
        )
    except client.ApiException:
        return None
    return (lease.metadata.annotations or {}).get(ANNOTATION_SHARDS)


def test_a_job_deleted_and_applied_again_continues_above_its_last_token(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    pairs = _schedulers(kube, namespace, 4)
    scheduler, capture = pairs[0]
    _create(kube_api, namespace, "again")
    scheduler.start()
    try:
        assert capture.wait_calls(3, timeout=30)
        _delete(kube_api, namespace, "again")
        before = max(ctx.token or 0 for ctx in _contexts(pairs, "again"))
        seen = len(capture.contexts)
        # Its JobRuns go with it (owner references): nothing of its history is read back.
        _create(kube_api, namespace, "again")
        assert capture.wait_calls(seen + 3, timeout=30)
    finally:
        scheduler.stop()
    contexts = _contexts(pairs, "again")
    after = [ctx.token or 0 for ctx in contexts[seen:]]
    assert after and min(after) > before, (before, after)


def test_a_shard_lease_deleted_while_its_records_are_queued_never_takes_tokens_back(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """JobRun creates are answered 503 (the records wait in the queue), and the shard Lease is
    deleted meanwhile: the Lease created again hands out tokens above every one used."""
    pairs = _schedulers(kube, namespace, 1)
    scheduler, capture = pairs[0]
    _create(kube_api, namespace, "queued")
    scheduler.start()
    try:
        assert capture.wait_calls(2, timeout=30)
        refused = Fault(verb="create", resource="jobruns", action="status", status=503)
        with fault_plan(kube).injected(refused):
            seen = len(capture.contexts)
            assert capture.wait_calls(seen + 2, timeout=30)
            before = max(ctx.token or 0 for ctx in capture.contexts)
            client.CoordinationV1Api(kube_api).delete_namespaced_lease(
                shard_lease_name("default", 0, shards=1), namespace
            )
            seen = len(capture.contexts)
            assert capture.wait_calls(seen + 3, timeout=30)
        runs = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            until=lambda items: len(items) >= len(capture.contexts) - 1,
            timeout=60,
        )
    finally:
        scheduler.stop()
    contexts = _contexts(pairs, "queued")
    later = [ctx.token or 0 for ctx in contexts[seen:]]
    assert later and min(later) > before, (before, later)
    _assert_once_with_growing_tokens(contexts)
    assert runs


def test_a_shard_instant_never_loses_a_job_to_another_jobs_shorter_deadline(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """Another holder's live grant blocks the shard for 3 s: the job with a 1 s
    startingDeadline misses that tick (recorded Missed), the one with 30 s still runs it."""
    pairs = _schedulers(kube, namespace, 1)
    scheduler = pairs[0][0]
    _create(kube_api, namespace, "patient", schedule="@every 10s", startingDeadline="30s")
    _create(kube_api, namespace, "hasty", schedule="@every 10s", startingDeadline="1s")
    scheduler.start()
    try:
        poll(lambda: _contexts(pairs, "patient"), timeout=30, what="a run of 'patient'")
        first = _contexts(pairs, "patient")[-1].tick
        blocked = first + timedelta(seconds=10)
        _hold_shard(kube_api, namespace, holder="someone-else", seconds=3, until=blocked)
        poll(
            lambda: any(c.tick == blocked for c in _contexts(pairs, "patient")),
            timeout=40,
            what="'patient' run at the blocked instant",
        )
        runs = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            job="hasty",
            until=lambda items: any(
                i["metadata"]["name"] == jobrun_name("hasty", blocked) for i in items
            ),
            timeout=30,
        )
    finally:
        scheduler.stop()
    hasty = next(i for i in runs if i["metadata"]["name"] == jobrun_name("hasty", blocked))
    assert hasty["status"]["outcome"] == "Missed"
    assert not any(c.tick == blocked for c in _contexts(pairs, "hasty"))
    late = [c for c in _contexts(pairs) if c.tick == blocked]
    assert all(c.job == "patient" for c in late)


def _hold_shard(api: Any, namespace: str, *, holder: str, seconds: int, until: datetime) -> None:
    """Just before `until`, write a live grant of `holder` on the group's one shard Lease (its
    recorded tick kept), as another replica's claim would."""
    leases = client.CoordinationV1Api(api)
    name = shard_lease_name("default", 0, shards=1)
    poll(lambda: _read(api, namespace, name), timeout=30, what=f"Lease {name}")
    wait = (until - datetime.now(UTC)).total_seconds() - 1.0
    assert wait > 0, "too late to block the instant"
    poll(
        lambda: (until - datetime.now(UTC)).total_seconds() < 1.0,
        timeout=wait + 1,
        what="a second before the instant",
    )

    def write() -> bool:
        raw = _read(api, namespace, name)
        assert raw is not None
        record = parse_lease(raw)
        now = datetime.now(UTC)
        grant = dataclasses.replace(
            record,
            holder=holder,
            lease_duration_s=seconds,
            transitions=record.transitions + 1,
            acquire_time=now,
            renew_time=now,
        )
        try:
            leases.replace_namespaced_lease(name, namespace, lease_body(grant, base=raw))
        except client.ApiException:
            return False
        return True

    poll(write, timeout=5, what="a grant of another holder written")


def _read(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    leases = client.CoordinationV1Api(api)
    try:
        lease = leases.read_namespaced_lease(name, namespace)
    except client.ApiException:
        return None
    raw: dict[str, Any] = api.sanitize_for_serialization(lease)
    return raw


def test_a_job_claimed_on_its_own_lease_by_an_earlier_version_continues_above_that_token(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """Upgrading from per-job claims: the group record, created now, starts its token
    ceiling above every token a leasecron Lease of the namespace carries."""
    record = LeaseRecord(holder="", lease_duration_s=15, transitions=40)
    body = lease_body(record, labels={LABEL_ROLE: LEGACY_JOB, LABEL_JOB: "upgraded"})
    body["metadata"]["name"] = job_lease_name("upgraded")
    client.CoordinationV1Api(kube_api).create_namespaced_lease(namespace, body)
    pairs = _schedulers(kube, namespace, 4)
    scheduler, capture = pairs[0]
    _create(kube_api, namespace, "upgraded")
    scheduler.start()
    try:
        assert capture.wait_calls(2, timeout=30)
    finally:
        scheduler.stop()
    tokens = [ctx.token or 0 for ctx in _contexts(pairs, "upgraded")]
    assert tokens and min(tokens) > 40, tokens


def test_a_new_group_has_its_shard_leases_made_ahead_so_its_first_claims_only_update(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """The replica that creates the group record makes the shard Leases with it, one token
    block reserved: the group's first instant costs no create and no ceiling write."""
    pairs = _schedulers(kube, namespace, 4)
    scheduler, capture = pairs[0]
    scheduler.start()
    try:
        leases = client.CoordinationV1Api(kube_api)
        names = [shard_lease_name("default", i, shards=4) for i in range(4)]
        poll(
            lambda: all(_read(kube_api, namespace, n) for n in names),
            timeout=30,
            what="the shard Leases made with the record",
        )
        record = leases.read_namespaced_lease(group_lease_name("default"), namespace)
        version = record.metadata.resource_version
        assert record.metadata.annotations["leasecron.dev/token-ceiling"] == str(TOKEN_BLOCK)
        uids = {n: _read(kube_api, namespace, n)["metadata"]["uid"] for n in names}  # type: ignore[index]
        _create(kube_api, namespace, "first")
        assert capture.wait_calls(2, timeout=30)
    finally:
        scheduler.stop()
    after = leases.read_namespaced_lease(group_lease_name("default"), namespace)
    assert after.metadata.resource_version == version, "the first claims wrote the record"
    assert {n: _read(kube_api, namespace, n)["metadata"]["uid"] for n in names} == uids  # type: ignore[index]
    assert [ctx.token for ctx in _contexts(pairs, "first")][:2] == [1, 2]


def test_a_shard_lease_keeps_who_claimed_its_latest_instant_after_the_grant_is_released(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """Each claim writes its claimer beside the instant (`leasecron.dev/claimer`), and a
    release leaves it: the next instant's placement keeps a shard with the replica that
    claimed it last while the spread allows (a replica joining moves little more than its
    share)."""
    pairs = _schedulers(kube, namespace, 1, 1)
    _create(kube_api, namespace, "kept")
    for scheduler, _ in pairs:
        scheduler.start()
    try:
        poll(lambda: len(_contexts(pairs, "kept")) >= 3, timeout=60, what="3 runs of the job")
    finally:
        for scheduler, _ in pairs:
            scheduler.stop()
    lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(
        shard_lease_name("default", 0, shards=1), namespace
    )
    claimer = (lease.metadata.annotations or {}).get(ANNOTATION_CLAIMER)
    holders = {ctx.holder for ctx in _contexts(pairs, "kept")}
    assert not lease.spec.holder_identity  # released on stop
    assert claimer in {scheduler.identity for scheduler, _ in pairs}, claimer
    last = [ctx for ctx in _contexts(pairs, "kept") if ctx.token == lease.spec.lease_transitions]
    assert all(ctx.holder == claimer for ctx in last), (claimer, holders)


def test_replicas_whose_record_does_not_list_a_moved_job_yet_claim_it_on_its_own_lease(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """Two replicas run `moving` and `staying` on one shard; the first two steps of a move of
    `moving` land (its shard Lease marks it moved, its own Lease is made) and the record is
    never told (as for a replica whose view of it is older than the third step). Every tick
    of both still runs once: a claim on the shard Lease runs nothing of `moving`, whose ticks
    are claimed on its own Lease from the mark on, with rising tokens."""
    pairs = _schedulers(kube, namespace, 1, 1)
    for name in ("moving", "staying"):
        _create(kube_api, namespace, name)
    for scheduler, _ in pairs:
        scheduler.start()
    try:
        poll(lambda: len(_contexts(pairs, "moving")) >= 2, timeout=30, what="runs of moving")
        ceiling = recorded_state(lease_obj(kube_api, namespace, group_lease_name("default")))
        mark = asyncio.run(_mark_and_make_own(kube, namespace, ceiling.ceiling))
        poll(lambda: len(_contexts(pairs, "moving")) >= 8, timeout=30, what="runs after the mark")
    finally:
        for scheduler, _ in pairs:
            scheduler.stop()
    contexts = _contexts(pairs)
    _assert_once_with_growing_tokens(contexts)
    after = [c for c in contexts if c.job == "moving" and (mark is None or c.tick > mark)]
    ticks = [c.tick for c in after]
    assert len(ticks) >= 4
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))]
    own = parse_lease(lease_obj(kube_api, namespace, own_lease_name("default", "moving")))
    assert own.transitions >= max(c.token or 0 for c in after)
    staying = [c.tick for c in contexts if c.job == "staying" and c.tick > ticks[0]]
    assert staying[: len(ticks) - 1] == ticks[1:]
    record = recorded_state(lease_obj(kube_api, namespace, group_lease_name("default")))
    assert "moving" not in record.own


async def _mark_and_make_own(kube: Kube, namespace: str, ceiling: int) -> datetime | None:
    """Steps 1 and 2 of `GroupRecord.move_job` for `moving`, without step 3."""
    shard, own = (
        LeaseLock.open(kube, None, clock=SYSTEM_CLOCK, namespace=namespace, name=n, role=ROLE_SHARD)
        for n in (shard_lease_name("default", 0, shards=1), own_lease_name("default", "moving"))
    )
    tick, token = await _mark_moved(shard, "moving")
    await _own_lease(own, mark=tick, token=max(token, ceiling))
    return tick
