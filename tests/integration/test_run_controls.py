"""spec.timeout, spec.retry and spec.concurrencyPolicy against a real API server: a run past
its timeout is stopped and recorded TimedOut, a failed run is retried on the replica that
holds its claim with the same token and one JobRun, retries stop before the next tick unless
overlap is allowed, Replace stops the running run for the next tick, Allow lets them overlap,
and the operator counts TimedOut as a failure."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client, watch
from operator_helpers import StartOperator, get_job, jobruns, poll
from prometheus_client import REGISTRY

from leasecron import JobContext, Scheduler
from leasecron.coordination.groups import change_shard_count
from leasecron.kube.clients import Kube
from leasecron.models.names import (
    ANNOTATION_TICK,
    GROUP,
    LABEL_ROLE,
    SCHEDULEDJOB_PLURAL,
    VERSION,
    format_tick,
    jobrun_name,
    parse_tick,
)
from leasecron.models.shards import shard_of
from leasecron.runtime import Tuning
from leasecron.runtime._overlap import MISSED_OVERLAP
from leasecron.testing.handlers import CapturingHandler, run_tick_sync, scheduled_job
from leasecron.testing.handlers import wait_for_jobruns as watch_jobruns

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)
YEARLY = "0 0 1 1 *"
"""One tick a year: `run_once` runs its latest, and the next is far away (retries go on)."""


def create_job(api: Any, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    created: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, scheduled_job(name, **spec)
    )
    return created


def status(run: dict[str, Any]) -> dict[str, Any]:
    return dict(run.get("status") or {})


def finished(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if status(i).get("outcome") not in (None, "Running", "Pending")]


def shard_holders(api: Any, namespace: str) -> list[str]:
    found = client.CoordinationV1Api(api).list_namespaced_lease(
        namespace, label_selector=f"{LABEL_ROLE}=shard"
    )
    return [lease.spec.holder_identity or "" for lease in found.items]


def scheduler(kube: Kube, namespace: str, **options: Any) -> Scheduler:
    options.setdefault("grace_period", 5)
    return Scheduler(namespace=namespace, kube=kube, tuning=FAST, **options)


@pytest.fixture
def replicas(kube: Kube, namespace: str) -> Iterator[list[tuple[Scheduler, CapturingHandler]]]:
    """Two replica Schedulers (threads, distinct identities) that register `work` once a test
    has given it a body with `attach`; stopped after the test."""
    made: list[tuple[Scheduler, CapturingHandler]] = []
    for _ in range(2):
        capture = CapturingHandler()
        replica = scheduler(kube, namespace)
        replica.register("work", capture)
        made.append((replica, capture))
    yield made
    for replica, _ in made:
        if replica.running:
            replica.stop()


def start(pairs: list[tuple[Scheduler, CapturingHandler]], body: Any) -> None:
    for replica, capture in pairs:
        capture.inner = body
        replica.start()


def contexts(pairs: list[tuple[Scheduler, CapturingHandler]]) -> list[JobContext]:
    found = [ctx for _, capture in pairs for ctx in list(capture.contexts)]
    return sorted(found, key=lambda ctx: (ctx.tick, ctx.attempt))


# --- spec.timeout -------------------------------------------------------------------------


def hang_until_cancelled(cancelled: threading.Event) -> Callable[[JobContext], Awaitable[None]]:
    """An async handler that never ends by itself; sets `cancelled` when its task is."""

    async def hang(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    return hang


def test_an_async_handler_past_its_timeout_is_cancelled_and_its_run_recorded_timed_out(
    kube: Kube, namespace: str
) -> None:
    cancelled = threading.Event()
    replica = scheduler(kube, namespace)
    replica.register("hang", hang_until_cancelled(cancelled))
    result = run_tick_sync(replica, scheduled_job("hang", schedule=YEARLY, timeout="1s"))
    assert result.outcome == "TimedOut"
    assert cancelled.is_set()
    assert result.jobrun is not None
    assert status(result.jobrun)["outcome"] == "TimedOut"
    assert status(result.jobrun)["message"] == "the run timed out after 1s"
    assert "attempts" not in status(result.jobrun)


def test_a_sync_handler_that_ignores_its_timeout_is_recorded_timed_out_and_its_grant_freed(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    release = threading.Event()
    replica = scheduler(kube, namespace, grace_period=1)

    def stubborn(ctx: JobContext) -> None:
        release.wait(60)  # never looks at ctx.lost

    replica.register("stubborn", stubborn)
    try:
        result = run_tick_sync(replica, scheduled_job("stubborn", schedule=YEARLY, timeout="1s"))
        assert result.outcome == "TimedOut"
        assert result.jobrun is not None
        message = status(result.jobrun)["message"]
        assert message.startswith("the run timed out after 1s")
        assert "did not stop within the grace period" in message
        assert result.context.lost.is_set()
        # The thread still runs, but the claim is released (not left to expire).
        assert not release.is_set()
        assert set(shard_holders(kube_api, namespace)) == {""}
    finally:
        release.set()


# --- spec.retry ---------------------------------------------------------------------------


def fail_twice(ctx: JobContext) -> None:
    if ctx.attempt < 3:
        raise RuntimeError(f"attempt {ctx.attempt} failed")


def test_a_run_that_fails_twice_then_succeeds_has_one_jobrun_with_three_attempts_and_one_token(
    kube: Kube, namespace: str
) -> None:
    capture = CapturingHandler(fail_twice)
    replica = scheduler(kube, namespace)
    replica.register("flaky", capture)
    job = scheduled_job("flaky", schedule=YEARLY, retry={"limit": 3, "backoff": "1s"})
    result = run_tick_sync(replica, job)
    assert result.outcome == "Succeeded"
    assert [ctx.attempt for ctx in capture.contexts] == [1, 2, 3]
    assert len({ctx.token for ctx in capture.contexts}) == 1
    assert len({ctx.tick for ctx in capture.contexts}) == 1
    assert result.jobrun is not None
    attempts = status(result.jobrun)["attempts"]
    assert [a["outcome"] for a in attempts] == ["Failed", "Failed", "Succeeded"]
    assert attempts[0]["message"] == "RuntimeError: attempt 1 failed"
    assert status(result.jobrun)["outcome"] == "Succeeded"
    assert status(result.jobrun)["message"] == "attempt 3 of 4"
    assert result.jobrun["spec"]["fencingToken"] == capture.contexts[0].token
    assert all(a["start"] <= a["end"] for a in attempts)
    assert attempts[0]["end"] <= attempts[1]["start"] <= attempts[2]["start"]


def test_retries_stay_on_the_replica_that_holds_the_claim(
    kube_api: Any, namespace: str, replicas: list[tuple[Scheduler, CapturingHandler]]
) -> None:
    create_job(
        kube_api,
        namespace,
        "flaky",
        handler="work",
        schedule="@every 5s",
        retry={"limit": 3, "backoff": "1s"},
    )
    start(replicas, fail_twice)
    runs = watch_jobruns(
        kube_api,
        namespace=namespace,
        job="flaky",
        until=lambda items: any(status(i).get("outcome") == "Succeeded" for i in items),
        timeout=40,
    )
    [run] = [r for r in runs if status(r).get("outcome") == "Succeeded"][:1]
    tick = run["spec"]["tick"]
    attempts = [
        ctx
        for ctx in contexts(replicas)
        if jobrun_name("flaky", ctx.tick) == run["metadata"]["name"]
    ]
    assert [ctx.attempt for ctx in attempts] == [1, 2, 3], tick
    assert {ctx.holder for ctx in attempts} == {run["spec"]["holder"]}
    assert {ctx.token for ctx in attempts} == {run["spec"]["fencingToken"]}
    assert [a["outcome"] for a in status(run)["attempts"]] == ["Failed", "Failed", "Succeeded"]


@pytest.mark.parametrize(("policy", "attempts"), [("Forbid", 2), ("Allow", 3)])
def test_retries_stop_before_the_next_tick_unless_overlap_is_allowed(
    kube: Kube, kube_api: Any, namespace: str, policy: str, attempts: int
) -> None:
    """`@every 2s`, back-off 1s then 2s: the second attempt starts a second after the tick,
    the third would start three seconds after it, past the next tick."""

    def always(ctx: JobContext) -> None:
        raise RuntimeError(f"attempt {ctx.attempt} failed")

    capture = CapturingHandler(always)
    replica = scheduler(kube, namespace)
    replica.register("doomed", capture)
    create_job(
        kube_api,
        namespace,
        "doomed",
        schedule="@every 2s",
        concurrencyPolicy=policy,
        retry={"limit": 2, "backoff": "1s"},
    )
    replica.start()
    try:
        runs = watch_jobruns(
            kube_api,
            namespace=namespace,
            job="doomed",
            until=lambda items: any(status(i).get("attempts") for i in finished(items)),
            timeout=30,
        )
    finally:
        replica.stop()
    first = next(r for r in finished(runs) if status(r).get("attempts"))
    assert status(first)["outcome"] == "Failed"
    assert len(status(first)["attempts"]) == attempts
    message = status(first)["message"]
    if policy == "Forbid":
        assert "retries stopped: attempt 3 would start at or after the next tick" in message
    else:
        assert message == "RuntimeError: attempt 3 failed (attempt 3 of 3)"


# --- spec.concurrencyPolicy ----------------------------------------------------------------


def test_forbid_starts_only_the_newest_of_the_ticks_that_waited_for_a_long_run(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    lock = threading.Lock()
    going: list[int] = [0]
    most: list[int] = [0]
    first = threading.Event()

    def long_then_quick(ctx: JobContext) -> None:
        with lock:
            going[0] += 1
            most[0] = max(most[0], going[0])
        try:
            if not first.is_set():
                first.set()
                ctx.wait_lost(3.5)
            else:
                ctx.wait_lost(0.3)
        finally:
            with lock:
                going[0] -= 1

    capture = CapturingHandler(long_then_quick)
    replica = scheduler(kube, namespace)
    replica.register("report", capture)
    create_job(kube_api, namespace, "report", schedule="@every 1s")
    replica.start()
    try:
        runs = watch_jobruns(
            kube_api,
            namespace=namespace,
            job="report",
            until=lambda items: (
                len([i for i in finished(items) if status(i)["outcome"] == "Succeeded"]) >= 4
            ),
            timeout=30,
        )
    finally:
        replica.stop()
    assert most[0] == 1, "runs of a Forbid job overlapped"
    assert any(status(r)["outcome"] == "Missed" for r in runs)
    ran = [ctx.tick for ctx in capture.contexts]
    assert len(ran) == len(set(ran))
    missed = {r["spec"]["tick"] for r in runs if status(r)["outcome"] == "Missed"}
    assert not missed & {format_tick(t) for t in ran}
    # Not late (startingDeadline 60 s): the record says the earlier run kept them waiting.
    reasons = {status(r)["message"] for r in runs if status(r)["outcome"] == "Missed"}
    assert reasons == {MISSED_OVERLAP}, reasons


def test_replace_starts_the_new_tick_by_its_start_by_even_when_the_old_run_stops_slowly(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """startingDeadline (1 s) below the stop grace (5 s): the old run is told to stop and goes
    on stopping; the tick that replaced it starts in time instead of waiting past its
    start-by (which lost both runs)."""
    first = threading.Event()

    def slow_to_stop(ctx: JobContext) -> None:
        if not first.is_set():
            first.set()
            time.sleep(4)  # does not look at ctx.lost

    capture = CapturingHandler(slow_to_stop)
    replica = scheduler(kube, namespace)
    replica.register("report", capture)
    create_job(
        kube_api,
        namespace,
        "report",
        schedule="@every 2s",
        startingDeadline="1s",
        concurrencyPolicy="Replace",
    )
    replica.start()
    try:
        assert capture.wait_calls(3, timeout=20)
    finally:
        replica.stop()
    ticks = [ctx.tick for ctx in capture.contexts]
    assert (ticks[1] - ticks[0]).total_seconds() == 2, ticks  # the very next tick ran


def test_replace_stops_the_running_run_when_the_next_tick_comes_on_any_replica(
    kube_api: Any, namespace: str, replicas: list[tuple[Scheduler, CapturingHandler]]
) -> None:
    def long(ctx: JobContext) -> None:
        ctx.wait_lost(30)

    create_job(
        kube_api,
        namespace,
        "long",
        handler="work",
        schedule="@every 2s",
        concurrencyPolicy="Replace",
    )
    start(replicas, long)
    runs = watch_jobruns(
        kube_api,
        namespace=namespace,
        job="long",
        until=lambda items: (
            len([i for i in finished(items) if "replaced" in status(i)["message"]]) >= 2
        ),
        timeout=40,
    )
    replaced = sorted(
        (r for r in finished(runs) if "replaced" in status(r)["message"]),
        key=lambda r: r["spec"]["tick"],
    )
    ran = contexts(replicas)
    per_tick = Counter(ctx.tick for ctx in ran)
    assert all(n == 1 for n in per_tick.values()), per_tick
    tokens = [ctx.token for ctx in ran]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    for run in replaced:
        assert status(run)["outcome"] == "Failed"
        assert status(run)["message"].startswith("the handler was stopped: replaced by tick ")
        later = status(run)["message"].rsplit(" ", 1)[1]
        assert later > run["spec"]["tick"]
        # The tick that replaced it ran, with a higher token.
        newer = [ctx.token for ctx in ran if format_tick(ctx.tick) == later]
        assert newer and newer[0] is not None and newer[0] > run["spec"]["fencingToken"]


def test_allow_lets_runs_of_consecutive_ticks_overlap_each_with_its_own_token(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    spans: dict[Any, list[float]] = {}

    def slow(ctx: JobContext) -> None:
        spans[ctx.tick] = [time.monotonic()]
        time.sleep(2.5)
        spans[ctx.tick].append(time.monotonic())

    capture = CapturingHandler(slow)
    replica = scheduler(kube, namespace)
    replica.register("slow", capture)
    create_job(kube_api, namespace, "slow", schedule="@every 1s", concurrencyPolicy="Allow")
    replica.start()
    try:
        runs = watch_jobruns(
            kube_api,
            namespace=namespace,
            job="slow",
            until=lambda items: len(finished(items)) >= 3,
            timeout=30,
        )
    finally:
        replica.stop()
    done = sorted(finished(runs), key=lambda r: r["spec"]["tick"])[:3]
    assert [status(r)["outcome"] for r in done] == ["Succeeded"] * 3
    tokens = [r["spec"]["fencingToken"] for r in done]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    ticks = sorted(t for t, span in spans.items() if len(span) == 2)[:2]
    first, second = spans[ticks[0]], spans[ticks[1]]
    assert second[0] < first[1], "the second run started only after the first ended"


# --- every-replica -------------------------------------------------------------------------


def runs_counted(namespace: str, job: str, outcome: str) -> float:
    labels = {"job_namespace": namespace, "scheduled_job": job, "outcome": outcome}
    value = REGISTRY.get_sample_value("leasecron_runs_total", labels | {"bucket": "every-replica"})
    return value or 0.0


def test_every_replica_runs_time_out_and_overlap_per_replica_as_their_job_says(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """`cache` times out after a second on each replica and is counted TimedOut; `warm`
    (Allow) overlaps with itself on each replica; each tick of `reload` (Replace) stops the
    run of the one before."""
    cancelled = threading.Event()
    overlapped = threading.Event()
    going: Counter[str] = Counter()
    lock = threading.Lock()
    replica = scheduler(kube, namespace)
    replica.register("cache", hang_until_cancelled(cancelled))

    @replica.job("warm")
    def warm(ctx: JobContext) -> None:
        with lock:
            going[ctx.holder] += 1
            if going[ctx.holder] > 1:
                overlapped.set()
        try:
            ctx.wait_lost(2.5)
        finally:
            with lock:
                going[ctx.holder] -= 1

    reloads = CapturingHandler(lambda ctx: ctx.wait_lost(30))
    replica.register("reload", reloads)
    create_job(kube_api, namespace, "cache", bucket="every-replica", timeout="1s")
    create_job(kube_api, namespace, "reload", bucket="every-replica", concurrencyPolicy="Replace")
    create_job(kube_api, namespace, "warm", bucket="every-replica", concurrencyPolicy="Allow")
    replica.start()
    try:
        poll(
            lambda: runs_counted(namespace, "cache", "TimedOut") >= 1,
            timeout=20,
            what="an every-replica run counted TimedOut",
        )
        assert overlapped.wait(20), "two runs of an Allow job never went at once"
        assert reloads.wait_calls(3, timeout=20), "a Replace job's run was not replaced"
    finally:
        replica.stop()
    assert cancelled.is_set()
    assert all(ctx.lost.is_set() for ctx in reloads.contexts[:2])
    assert runs_counted(namespace, "reload", "Failed") >= 2
    assert not jobruns(kube_api, namespace)  # every-replica runs are counted, not recorded


def test_an_every_replica_tick_that_cannot_start_by_its_starting_deadline_is_skipped(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """The replica's event loop is held for 3 s (an async handler of another job that blocks
    it once): the every-replica ticks of `cache` (`@every 1s`, startingDeadline 1s) that came
    meanwhile are skipped `deadline` once the loop is free, as a claimed run's would be, and
    none of its runs starts past its tick + startingDeadline."""
    blocked = threading.Event()
    started: list[tuple[float, float]] = []
    replica = scheduler(kube, namespace)

    @replica.job("hog")
    async def hog(ctx: JobContext) -> None:
        if not blocked.is_set():
            blocked.set()
            time.sleep(3)  # noqa: ASYNC251 (holds the replica's event loop on purpose)

    @replica.job("cache")
    def cache(ctx: JobContext) -> None:
        started.append((ctx.tick.timestamp(), time.time()))

    create_job(kube_api, namespace, "hog", bucket="every-replica", startingDeadline="30s")
    create_job(kube_api, namespace, "cache", bucket="every-replica", startingDeadline="1s")
    replica.start()
    labels = {"job_namespace": namespace, "scheduled_job": "cache", "reason": "deadline"}
    try:
        poll(
            lambda: (REGISTRY.get_sample_value("leasecron_skips_total", labels) or 0) >= 1,
            timeout=20,
            what="an every-replica tick skipped past its startingDeadline",
        )
        count = len(started)
        poll(lambda: len(started) > count, timeout=10, what="cache running again")
    finally:
        replica.stop()
    assert blocked.is_set()
    late = [(tick, at) for tick, at in started if at - tick > 1.5]
    assert not late, f"every-replica runs started past their startingDeadline: {late}"


def test_nothing_is_claimed_or_run_before_its_instant(
    kube: Kube, kube_api: Any, namespace: str
) -> None:
    """The timer launches an instant's claims and every-replica runs a little before it, and
    each waits for the instant itself: every shard claim's acquireTime is at or after the
    instant the Lease records, and no every-replica run starts before its tick (one host
    clock for the replica and this test, so no tolerance)."""
    starts: list[tuple[float, float]] = []
    replica = scheduler(kube, namespace)
    replica.register("report", lambda ctx: None)

    @replica.job("cache")
    def cache(ctx: JobContext) -> None:
        starts.append((ctx.tick.timestamp(), time.time()))

    create_job(kube_api, namespace, "report", schedule="@every 1s")
    create_job(kube_api, namespace, "cache", bucket="every-replica", schedule="@every 1s")
    leases = client.CoordinationV1Api(kube_api)
    claims: set[tuple[str, datetime]] = set()  # (the instant recorded, acquireTime)
    replica.start()
    try:
        for event in watch.Watch().stream(
            leases.list_namespaced_lease,
            namespace,
            label_selector=f"{LABEL_ROLE}=shard",
            timeout_seconds=30,
        ):
            lease = event["object"]
            tick = (lease.metadata.annotations or {}).get(ANNOTATION_TICK)
            if tick and lease.spec.acquire_time is not None:
                claims.add((tick, lease.spec.acquire_time))
            if len({t for t, _ in claims}) >= 5 and len(starts) >= 5:
                break
    finally:
        replica.stop()
    assert len({t for t, _ in claims}) >= 5 and len(starts) >= 5, (claims, starts)
    assert [(t, a) for t, a in claims if a < parse_tick(t)] == []
    assert [(t, at) for t, at in starts if at < t] == []


# --- the operator -------------------------------------------------------------------------


def test_the_operator_shows_a_timed_out_run_as_the_last_run_and_not_as_a_success(
    kube: Kube, kube_api: Any, namespace: str, start_operator: StartOperator
) -> None:
    create_job(kube_api, namespace, "hang", schedule=YEARLY, timeout="1s")
    replica = scheduler(kube, namespace)
    replica.register("hang", hang_until_cancelled(threading.Event()))
    with start_operator():
        result = run_tick_sync(replica, "hang")
        assert result.outcome == "TimedOut"

        def shown() -> dict[str, Any] | None:
            last = (get_job(kube_api, namespace, "hang").get("status") or {}).get("lastRun")
            return last if last and last.get("outcome") == "TimedOut" else None

        last = poll(shown, timeout=15, what="lastRun TimedOut")
        assert last["fencingToken"] == result.context.token
        job_status = get_job(kube_api, namespace, "hang")["status"]
        assert "lastSuccessfulTime" not in job_status
        assert [status(r)["outcome"] for r in jobruns(kube_api, namespace)] == ["TimedOut"]


def test_forbid_holds_across_a_shard_count_change_while_a_run_goes_on_the_retired_lease(
    kube_api: Any, namespace: str, kubes: list[Kube]
) -> None:
    """Replica A runs `long`'s first (slow) run under the one shard Lease of count 1; the
    count becomes 2 meanwhile, and replica B, the only one with every handler due, claims the
    next instants on the new shard Lease. B does not start `long` while A's run goes."""
    assert shard_of("long", shards=2) == shard_of("other", shards=2)
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    first = threading.Event()

    def long(who: str) -> Callable[[JobContext], None]:
        def run(ctx: JobContext) -> None:
            start = time.time()
            if not first.is_set():
                first.set()
                time.sleep(6)
            with lock:
                spans.append((who, start, time.time()))

        return run

    create_job(kube_api, namespace, "long", schedule="@every 2s")
    create_job(kube_api, namespace, "other", schedule="@every 2s")
    a = Scheduler(namespace=namespace, kube=kubes[0], identity="a", tuning=FAST, shards=1)
    a.register("long", long("a"))
    b = Scheduler(namespace=namespace, kube=kubes[1], identity="b", tuning=FAST, shards=1)
    b.register("long", long("b"))
    b.register("other", lambda ctx: None)
    a.start()
    try:
        assert first.wait(20)
        asyncio.run(change_shard_count(kubes[2], namespace=namespace, group="default", shards=2))
        b.start()
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any(w == "b" for w, _, _ in spans):
                time.sleep(0.2)
        finally:
            b.stop()
    finally:
        a.stop()
    assert any(w == "b" for w, _, _ in spans), spans
    ordered = sorted(spans, key=lambda s: s[1])
    assert all(x[2] <= y[1] for x, y in itertools.pairwise(ordered)), ordered
