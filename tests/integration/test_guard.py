"""Guards against the real API server: replicas (threads with their own client and identity,
coroutines on one loop, separate processes) fire the same ticks and exactly one body runs per
tick with rising tokens; a late trigger, a takeover, an unreachable store and a failing body;
and with `job=`, JobRuns the operator reads (no alarm for a tick a guard ran, one for a tick
nobody ran), a token floor and the refusal of a single-owner job. A holder cut off mid-body
blocks the guard for its short Lease, not its at_most_for, and at_most_for still ends a run
that is not kept alive; a deleted Lease neither runs a claimed tick again nor hands out a
lower token; a job guard's body never starts after its tick's start-by."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api
from lease_helpers import lease_obj, take_over
from operator_helpers import StartOperator, apply_job, job_condition, jobruns, poll

from leasecron.kube.clients import Kube
from leasecron.models.clocks import SystemClock
from leasecron.models.groups import ANNOTATION_OWN_LEASES, group_lease_name
from leasecron.models.names import jobrun_name
from leasecron.models.schedules import Schedule
from leasecron.models.shards import own_lease_name
from leasecron.runtime import (
    Guard,
    GuardConfigError,
    GuardResult,
    GuardRun,
    JobContext,
    LostLockError,
    Scheduler,
    aclose_guards,
    current_run,
    guard,
)
from leasecron.runtime._guard_runtime import background
from leasecron.testing import ChildProcess
from leasecron.testing.faults import Fault, fault_plan

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("closed_guards")]
REPLICAS = 3
ROUNDS = 5
LEASE = "leasecron-guard-send-reminders"
TAKEN = {"taken", "live_grant", "conflict", "exists"}
"""The reasons of a replica that lost the tick to another one."""
REPLICA_SCRIPT = Path(__file__).with_name("_guard_replica.py")


def recent_ticks(count: int) -> list[datetime]:
    """`count` distinct whole-second ticks ending now (within any starting deadline)."""
    now = datetime.now(UTC).replace(microsecond=0)
    return [now - timedelta(seconds=count - i) for i in range(count)]


def fire_together(
    calls: list[Callable[[], GuardResult[Any]]],
) -> list[GuardResult[Any]]:
    """Call each of `calls` in its own thread at the same moment; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[GuardResult[Any] | None] = [None] * len(calls)

    def fire(index: int) -> None:
        barrier.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


def assert_one_body_per_tick(rounds: list[list[GuardResult[Any]]]) -> list[int]:
    """Each round ran exactly once, the others lost it to that run; the tokens it ran with."""
    tokens = []
    for results in rounds:
        ran = [r for r in results if r.ran]
        assert len(ran) == 1, results
        assert {r.reason for r in results if not r.ran} <= TAKEN, results
        assert ran[0].token is not None and ran[0].value == ran[0].holder
        tokens.append(ran[0].token)
    return tokens


def guarded_replicas(
    kubes: list[Kube],
    namespace: str,
    current: list[datetime],
    body: Callable[[], str],
    **options: Any,
) -> list[Callable[[], GuardResult[str]]]:
    """`body` guarded as `send-reminders` on each replica (its own client and identity), the
    tick being the last of `current`."""
    return [
        guard(
            "send-reminders",
            tick=lambda: current[-1],
            namespace=namespace,
            kube=kube,
            identity=f"replica-{index}",
            **options,
        )(body)
        for index, kube in enumerate(kubes[:REPLICAS])
    ]


def test_three_threaded_replicas_firing_the_same_ticks_run_each_body_once_with_rising_tokens(
    kubes: list[Kube], namespace: str
) -> None:
    current: list[datetime] = []
    bodies: Counter[datetime] = Counter()
    lock = threading.Lock()

    def send_reminders() -> str:
        run = current_run()
        run.assert_held()
        with lock:
            bodies[run.tick] += 1
        return run.holder

    replicas = guarded_replicas(kubes, namespace, current, send_reminders, at_most_for="3s")
    rounds = []
    for tick in recent_ticks(ROUNDS):
        current.append(tick)
        rounds.append(fire_together(list(replicas)))
    tokens = assert_one_body_per_tick(rounds)
    assert tokens == sorted(set(tokens))  # strictly increasing across ticks
    assert bodies == Counter(current)
    assert [r.tick for r in rounds[0]] == [current[0]] * REPLICAS


def test_the_replica_that_ran_the_previous_tick_claims_the_next_without_its_stagger(
    kubes: list[Kube], namespace: str
) -> None:
    """With a long stagger (10 s), the first tick waits for the luckiest replica's random turn;
    from then on the replica that claimed the previous tick claims the next at once, and the
    others lose it to that claim."""
    current: list[datetime] = []
    replicas = guarded_replicas(
        kubes,
        namespace,
        current,
        lambda: current_run().holder,
        stagger="10s",
        starting_deadline="60s",
    )
    rounds, seconds = [], []
    for tick in recent_ticks(6):
        current.append(tick)
        started = time.monotonic()
        rounds.append(fire_together(list(replicas)))
        seconds.append(time.monotonic() - started)
    assert_one_body_per_tick(rounds)
    holders = [next(r.holder for r in results if r.ran) for results in rounds]
    assert holders[1:] == [holders[0]] * 5, holders
    assert max(seconds[1:]) < 2.0, seconds


def test_a_replica_whose_trigger_fires_after_the_tick_ran_skips_it_as_taken(
    kubes: list[Kube], namespace: str
) -> None:
    (tick,) = recent_ticks(1)
    early = Guard("send-reminders", namespace=namespace, kube=kubes[0], identity="early")
    late = Guard("send-reminders", namespace=namespace, kube=kubes[1], identity="late")
    with early.claim(tick=tick) as run:
        assert run and run.token is not None
    assert lease_obj_holder_released(kubes[1], namespace)
    with late.claim(tick=tick) as again:
        assert not again
        assert again.reason == "taken"
        with pytest.raises(LostLockError, match="not claimed"):
            again.assert_held()
    with late.claim(tick=tick + timedelta(seconds=1)) as nxt:
        assert nxt and nxt.token is not None and nxt.token > (run.token or 0)


def lease_obj_holder_released(kube: Kube, namespace: str) -> bool:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}"
    obj = kube.request_sync("GET", path)
    return bool(obj["spec"].get("holderIdentity", "") == "")


def test_async_replicas_on_one_loop_run_each_tick_once_and_see_their_run_inside(
    kubes: list[Kube], namespace: str
) -> None:
    async def scenario() -> list[list[GuardResult[str]]]:
        current: list[datetime] = []

        def make(index: int) -> Callable[[], Any]:
            @guard(
                "send-reminders",
                tick=lambda: current[-1],
                namespace=namespace,
                kube=kubes[index],
                identity=f"replica-{index}",
            )
            async def send_reminders() -> str:
                await asyncio.sleep(0)
                run = current_run()
                run.assert_held()
                return run.holder

            return send_reminders

        replicas = [make(i) for i in range(REPLICAS)]
        rounds = []
        try:
            for tick in recent_ticks(ROUNDS):
                current.append(tick)
                rounds.append(list(await asyncio.gather(*(r() for r in replicas))))
        finally:
            await aclose_guards()
        return rounds

    rounds = asyncio.run(scenario())
    tokens = assert_one_body_per_tick(rounds)
    assert tokens == sorted(set(tokens))


def still_held(run: GuardRun) -> bool:
    return run.held


def test_the_async_context_manager_yields_the_held_run_and_releases_it_on_exit(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    (tick,) = recent_ticks(1)
    g = Guard("send-reminders", namespace=namespace, kube=kubes[0], identity="solo")

    async def scenario() -> int | None:
        try:
            async with g.claim(tick=tick) as run:
                assert run and current_run() is run
                assert run.tick == tick and still_held(run)
                assert lease_obj(kube_api, namespace, LEASE)["spec"]["holderIdentity"] == "solo"
            assert not still_held(run)
            return run.token
        finally:
            await aclose_guards()

    token = asyncio.run(scenario())
    spec = lease_obj(kube_api, namespace, LEASE)["spec"]
    assert (spec.get("holderIdentity", ""), spec["leaseTransitions"]) == ("", token)


def test_assert_held_raises_inside_the_body_once_another_holder_takes_the_lease(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    taken_over = threading.Event()

    @guard("send-reminders", every="1s", namespace=namespace, kube=kubes[0], at_most_for="2s")
    def send_reminders() -> None:
        run = current_run()
        run.assert_held()
        take_over(kube_api, namespace, LEASE, holder="intruder", transitions=99)
        assert run.lost.wait(10)
        taken_over.set()
        run.assert_held()

    with pytest.raises(LostLockError, match="intruder"):
        send_reminders()
    assert taken_over.is_set()
    assert lease_obj(kube_api, namespace, LEASE)["spec"]["holderIdentity"] == "intruder"


def test_the_bodys_exception_propagates_after_its_grant_is_released(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    @guard("send-reminders", every="1s", namespace=namespace, kube=kubes[0], identity="solo")
    def send_reminders() -> None:
        raise ValueError("mail server down")

    with pytest.raises(ValueError, match="mail server down"):
        send_reminders()
    assert lease_obj(kube_api, namespace, LEASE)["spec"].get("holderIdentity", "") == ""


def test_an_unreachable_store_is_a_store_unavailable_skip_and_the_guard_resumes_after(
    kubes: list[Kube], namespace: str
) -> None:
    first, later = recent_ticks(2)
    g = Guard("send-reminders", namespace=namespace, kube=kubes[0], identity="solo")
    down = Fault(action="fail")
    with fault_plan(kubes[0]).injected(down), g.claim(tick=first) as run:
        assert (run.ran, run.reason) == (False, "store_unavailable")  # no cache could start
    with g.claim(tick=first) as run:
        assert run
    with fault_plan(kubes[0]).injected(down), g.claim(tick=later) as run:
        assert (run.ran, run.reason) == (False, "store_unavailable")  # the write is not sent
    with g.claim(tick=later) as run:
        assert run


def test_a_claim_whose_write_meets_another_is_decided_again_on_the_lease_as_it_is_now(
    kubes: list[Kube], namespace: str
) -> None:
    """A 409 on the claim write says another write landed first, not that the tick is
    taken: the guard reads the Lease again and decides on it, as the engine's claims do. Here
    the write it met took nothing (the 409 is answered in the store's place), so the tick is
    still free, and it runs."""
    first, later = recent_ticks(2)
    g = Guard("send-reminders", namespace=namespace, kube=kubes[0], identity="solo")
    with g.claim(tick=first) as run:  # creates the Lease
        assert run
    met = Fault(verb="update", resource="leases", name=LEASE, action="status", status=409, times=1)
    with fault_plan(kubes[0]).injected(met) as rule, g.claim(tick=later) as run:
        assert run, run.reason
        assert rule.hits == 1
        assert run.token == 2


def test_a_guard_that_knows_no_tick_says_how_to_give_one(kubes: list[Kube], namespace: str) -> None:
    g = Guard("send-reminders", namespace=namespace, kube=kubes[0])
    with pytest.raises(GuardConfigError, match="does not know which tick"):
        g.claim_sync()


def ran_once(g: Guard) -> bool:
    """Whether `g` claimed (and ran) the current tick of its schedule."""
    with g.claim() as run:
        return run.ran


def test_a_holder_cut_off_mid_body_blocks_the_guard_for_its_short_lease_not_its_at_most_for(
    kubes: list[Kube], namespace: str
) -> None:
    cut_off, standby = (
        Guard(
            "send-reminders",
            every="1s",
            namespace=namespace,
            kube=kubes[i],
            identity=f"r{i}",
            at_most_for="5m",
            lease_duration="2s",
        )
        for i in range(2)
    )
    holding, done = threading.Event(), threading.Event()

    def hang() -> None:
        with cut_off.claim() as run:
            assert run
            holding.set()
            done.wait(30)  # a body that hangs while its replica is cut off from the store

    body = threading.Thread(target=hang)
    body.start()
    try:
        assert holding.wait(10)
        with fault_plan(kubes[0]).injected(Fault(action="fail")):  # no renewal gets through
            poll(lambda: ran_once(standby), timeout=20, what="a tick run by the standby")
    finally:
        done.set()
        body.join(10)


def test_a_body_not_kept_alive_is_told_at_its_at_most_for_and_its_grant_released(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    g = Guard(
        "send-reminders",
        every="1s",
        namespace=namespace,
        kube=kubes[0],
        identity="solo",
        at_most_for="2s",
        keep_alive=False,
        lease_duration="1s",
    )
    with g.claim() as run:
        assert run and run.lost.wait(10)
        assert not run.held
        free = poll(
            lambda: lease_obj(kube_api, namespace, LEASE)["spec"].get("holderIdentity") == "",
            timeout=10,
            what="the grant released at atMostFor while the body still runs",
        )
        assert free


def seen_by(kube: Kube, namespace: str) -> dict[str, Any] | None:
    """The guard Lease as the sync guards' cache for `kube` shows it."""
    return background()[1].seen(kube, namespace, LEASE)


def test_a_deleted_guard_lease_neither_runs_a_claimed_tick_again_nor_hands_out_a_lower_token(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    earlier, tick, later = recent_ticks(3)
    a, b = (
        Guard("send-reminders", namespace=namespace, kube=kubes[i], identity=f"r{i}", stagger=0)
        for i in range(2)
    )
    with b.claim(tick=earlier) as first:
        assert first
    with a.claim(tick=tick) as run:
        assert run and run.token is not None
    mark = tick.strftime("%Y-%m-%dT%H:%M:%SZ")
    poll(
        lambda: (
            (seen_by(kubes[1], namespace) or {})["metadata"]["annotations"].get(
                "leasecron.dev/tick"
            )
            == mark
        ),
        timeout=10,
        what="the other replica seeing the tick claimed",
    )
    CoordinationV1Api(kube_api).delete_namespaced_lease(LEASE, namespace)
    poll(
        lambda: seen_by(kubes[1], namespace) is None,
        timeout=10,
        what="the other replica seeing the Lease deleted",
    )
    with b.claim(tick=tick) as again:
        assert (again.ran, again.reason) == (False, "taken")
    with b.claim(tick=later) as nxt:
        assert nxt and nxt.token is not None and nxt.token > run.token


# --- separate processes -------------------------------------------------------------------


def test_three_replica_processes_run_each_tick_once(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
    lines: list[dict[str, Any]] = []
    seen = threading.Lock()

    def on_line(data: dict[str, Any], received: float) -> None:
        with seen:
            lines.append(data)

    processes = [
        ChildProcess(
            name=f"replica-{i}",
            argv=[
                *(sys.executable, str(REPLICA_SCRIPT), namespace, f"replica-{i}"),
                *(start.isoformat(), str(ROUNDS)),
            ],
            log_path=tmp_path / f"replica-{i}.log",
            env={"KUBECONFIG": str(kubeconfig)},
            on_line=on_line,
        )
        for i in range(REPLICAS)
    ]
    try:
        for process in processes:
            assert process.wait_exit(timeout=60) == 0, process.log_tail()
            assert process.join_reader(timeout=10)
    finally:
        for process in processes:
            process.kill()
    by_tick: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_tick.setdefault(line["tick"], []).append(line)
    assert len(lines) == REPLICAS * ROUNDS and len(by_tick) >= ROUNDS, by_tick
    tokens = []
    for tick, calls in sorted(by_tick.items()):
        ran = [call for call in calls if call["ran"]]
        assert len(ran) == 1, (tick, calls)
        assert {call["reason"] for call in calls if not call["ran"]} <= TAKEN, (tick, calls)
        tokens.append(ran[0]["token"])
    assert tokens == sorted(set(tokens))


# --- with a ScheduledJob ------------------------------------------------------------------


def run_record(kube_api: ApiClient, namespace: str, job: str, tick: datetime) -> dict[str, Any]:
    name = jobrun_name(job, tick)
    found = [r for r in jobruns(kube_api, namespace) if r["metadata"]["name"] == name]
    assert found, f"no JobRun {name}"
    return found[0]


def test_a_job_guard_records_one_jobrun_per_run_and_another_replica_skips(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    apply_job(kube_api, namespace, "report", schedule="@every 1s", startingDeadline="30s")
    first, second = (
        Guard("report", job="report", namespace=namespace, kube=kubes[i], identity=f"r{i}")
        for i in range(2)
    )
    (tick,) = recent_ticks(1)
    with first.claim(tick=tick) as run:
        assert run
        running = run_record(kube_api, namespace, "report", tick)
        assert running["status"]["outcome"] == "Running"
        with second.claim(tick=tick) as other:
            assert (other.ran, other.reason) == (False, "taken")
    record = run_record(kube_api, namespace, "report", tick)
    assert record["spec"]["holder"] == "r0"
    assert record["spec"]["fencingToken"] == run.token
    assert record["status"]["outcome"] == "Succeeded"
    assert record["metadata"]["ownerReferences"][0]["name"] == "report"
    # Claimed on the job's own shard Lease, the one a Scheduler of the job claims on too.
    lease = lease_obj(kube_api, namespace, own_lease_name("default", "report"))
    assert lease["metadata"]["labels"]["leasecron.dev/role"] == "shard"
    assert lease["metadata"]["labels"]["leasecron.dev/job"] == "report"
    assert lease["spec"]["leaseTransitions"] == run.token
    group = lease_obj(kube_api, namespace, group_lease_name("default"))
    assert group["metadata"]["annotations"][ANNOTATION_OWN_LEASES] == '["report"]'


def test_a_job_guards_lease_starts_above_the_highest_token_the_job_has_on_record(
    kube_api: ApiClient, kubes: list[Kube], namespace: str, one_run: str
) -> None:
    used = max(r["spec"]["fencingToken"] for r in jobruns(kube_api, namespace))
    g = Guard("report-guard", job=one_run, namespace=namespace, kube=kubes[0], identity="solo")
    assert g.settings.lease == "leasecron-guard-report-guard"
    with g.claim() as run:
        assert run and run.token is not None
        assert run.token > used


def test_a_failing_body_is_recorded_failed_with_its_error(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    apply_job(kube_api, namespace, "report", schedule="@every 1s", startingDeadline="30s")
    g = Guard("report", job="report", namespace=namespace, kube=kubes[0], identity="solo")
    (tick,) = recent_ticks(1)
    with pytest.raises(ValueError, match="disk full"), g.claim(tick=tick):
        raise ValueError("disk full")
    record = run_record(kube_api, namespace, "report", tick)
    assert record["status"]["outcome"] == "Failed"
    assert record["status"]["message"] == "ValueError: disk full"


def test_a_job_guards_body_never_starts_after_its_ticks_start_by_and_the_run_is_recorded_missed(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    apply_job(kube_api, namespace, "report", schedule="@every 1s", startingDeadline="3s")
    g = Guard("report", job="report", namespace=namespace, kube=kubes[0], identity="solo")

    def warmed_up() -> bool:  # caches started, the store answering; the tick past its deadline
        with g.claim(tick=recent_ticks(10)[0]) as warm:
            return (warm.ran, warm.reason) == (False, "deadline")

    poll(warmed_up, timeout=20, what="a claim that reached the store")
    tick = datetime.now(UTC).replace(microsecond=0)  # its start-by is 2-3 s from now
    slow = Fault(action="delay", verb="create", resource="jobruns", seconds=3.5)
    bodies = []
    with fault_plan(kubes[0]).injected(slow), g.claim(tick=tick) as run:
        if run:
            bodies.append(run.tick)
    assert (run.ran, run.reason, bodies) == (False, "deadline", [])
    record = run_record(kube_api, namespace, "report", tick)
    assert record["status"]["outcome"] == "Missed"
    assert "startingDeadline" in record["status"]["message"]


def test_a_job_guard_whose_run_record_is_not_confirmed_runs_no_body_and_records_the_tick_missed(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    """The create of the tick's JobRun lands but its reply is lost, and the read-back fails:
    the body does not run, the grant is released (another replica claims the next tick at
    once), and the record that landed Running is finished Missed by the record writer."""
    apply_job(kube_api, namespace, "report", schedule="@every 1s", startingDeadline="30s")
    solo, other = (
        Guard("report", job="report", namespace=namespace, kube=kubes[i], identity=f"r{i}")
        for i in range(2)
    )
    first, second = recent_ticks(2)
    plan = fault_plan(kubes[0])
    plan.add(Fault(action="lose_reply", verb="create", resource="jobruns", times=1))
    plan.add(Fault(action="fail", verb="get", resource="jobruns", times=1))
    bodies = []
    with solo.claim(tick=first) as run:
        if run:
            bodies.append(run.tick)
    assert (run.ran, run.reason, bodies) == (False, "record_failed", [])
    assert [rule.hits for rule in plan.rules] == [1, 1]

    def outcome() -> str:
        return run_record(kube_api, namespace, "report", first)["status"]["outcome"]

    poll(lambda: outcome() == "Missed", timeout=20, what="the unconfirmed run recorded Missed")
    record = run_record(kube_api, namespace, "report", first)
    assert "could not be confirmed" in record["status"]["message"]
    with other.claim(tick=second) as later:
        assert later, later.reason


def test_a_job_guard_on_a_single_owner_job_is_refused_naming_spec_bucket(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    apply_job(kube_api, namespace, "poller", bucket="single-owner")
    g = Guard("poller", job="poller", namespace=namespace, kube=kubes[0], every=None)
    with pytest.raises(GuardConfigError, match=r"spec\.bucket \('single-owner'\)"):
        g.claim_sync()


def test_the_operator_alarms_a_tick_nobody_ran_and_not_the_ticks_the_guard_ran(
    kube_api: ApiClient, kubes: list[Kube], namespace: str, start_operator: StartOperator
) -> None:
    with start_operator():
        apply_job(kube_api, namespace, "ping", schedule="@every 1s", startingDeadline="2s")
        g = Guard("ping", job="ping", namespace=namespace, kube=kubes[0], identity="pinger")
        stop = threading.Event()
        ran: list[datetime] = []

        @g
        def ping() -> None:
            ran.append(current_run().tick)

        def timer() -> None:  # the application's own scheduler: a call every 0.5 s
            while not stop.wait(0.5):
                ping()

        def on_schedule() -> str | None:
            found = job_condition(kube_api, namespace, "ping", "OnSchedule")
            return f"{found['status']}/{found['reason']}" if found else None

        thread = threading.Thread(target=timer)
        thread.start()
        try:
            poll(lambda: len(ran) >= 6, timeout=30, what="six ticks run by the guard")
            poll(lambda: on_schedule() == "True/RunsStarted", timeout=15, what="on schedule")
        finally:
            stop.set()
            thread.join(10)
        last = max(ran)

        def missed() -> list[dict[str, Any]]:
            return [
                r
                for r in jobruns(kube_api, namespace)
                if r["status"].get("outcome") == "Missed"
                and datetime.fromisoformat(r["spec"]["tick"]) > last
            ]

        poll(missed, timeout=30, what="a tick after the guard stopped recorded Missed")
        poll(lambda: on_schedule() == "False/MissedRun", timeout=15, what="flagged MissedRun")
    records = {r["spec"]["tick"]: r for r in jobruns(kube_api, namespace)}
    for tick in ran:
        record = records[tick.strftime("%Y-%m-%dT%H:%M:%SZ")]
        assert (record["status"]["outcome"], record["spec"]["holder"]) == ("Succeeded", "pinger")


def test_a_job_a_scheduler_runs_and_a_guard_takes_up_is_claimed_on_one_lease_each_tick_once(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    """A Scheduler runs `report` and `other` on a one-shard group; a job guard of `report`
    starts firing every 0.2 s while it runs (moving `report` to its own shard Lease), then
    the Scheduler stops and the guard goes on alone. Every tick runs once, none is lost at
    the move or at the hand-over, and `report`'s tokens rise tick after tick whoever ran it:
    one Lease, one token sequence."""
    for name in ("report", "other"):
        apply_job(kube_api, namespace, name, schedule="@every 1s", startingDeadline="30s")
    ran: list[tuple[str, datetime, str]] = []
    skips: set[str] = set()
    lock = threading.Lock()

    def scheduled(ctx: JobContext) -> None:
        with lock:
            ran.append((ctx.job, ctx.tick, "scheduler"))

    scheduler = Scheduler(namespace=namespace, kube=kubes[0], identity="scheduler", shards=1)
    scheduler.register("report", scheduled)
    scheduler.register("other", scheduled)
    guard = Guard("report", job="report", namespace=namespace, kube=kubes[1], identity="guard")
    stop = threading.Event()

    def fire() -> None:
        while not stop.wait(0.2):
            with guard.claim(tick=datetime.now(UTC)) as run, lock:
                if run:
                    ran.append(("report", run.tick, "guard"))
                else:
                    skips.add(run.reason)

    firing = threading.Thread(target=fire)
    scheduler.start()
    try:
        time.sleep(3)
        began = datetime.now(UTC)
        firing.start()
        time.sleep(3)
        scheduler.stop()
        stopped = datetime.now(UTC)
        time.sleep(3)
        ended = datetime.now(UTC) - timedelta(seconds=1)
    finally:
        stop.set()
        scheduler.stop()
        if firing.is_alive():
            firing.join()
    # Whichever claims first runs the tick; the other finds it taken (or its grant live), or
    # its write meets the first one's (conflict) when both read the Lease before either wrote.
    assert skips <= {"taken", "live_grant", "conflict"}, skips
    assert {who for _, _, who in ran} == {"scheduler", "guard"}
    by_tick = Counter((job, tick) for job, tick, _ in ran)
    assert [k for k, n in by_tick.items() if n > 1] == []
    every = Schedule.parse("@every 1s")
    lost = [t for t in every.ticks_between(began, ended, limit=60) if ("report", t) not in by_tick]
    assert lost == []
    on_other = every.ticks_between(began, stopped - timedelta(seconds=1), limit=60)
    assert [t for t in on_other if ("other", t) not in by_tick] == []
    records = sorted(
        (r for r in jobruns(kube_api, namespace) if r["spec"]["job"] == "report"),
        key=lambda r: str(r["spec"]["tick"]),
    )
    tokens = [r["spec"]["fencingToken"] for r in records]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert lease_obj(kube_api, namespace, own_lease_name("default", "report"))


def test_a_guard_whose_host_clock_runs_ahead_runs_no_tick_early_and_takes_none_from_others(
    kubes: list[Kube], namespace: str
) -> None:
    """Two guards fired every 0.2 s, one on a host 2.5 s fast: both read the API server's
    clock, so no body starts before its tick and the fast one never claims the next tick
    first (which made the tick before it `taken` for everyone, run by none)."""
    ran: list[tuple[datetime, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    guards = [
        Guard("beat", every="1s", namespace=namespace, kube=kubes[i], identity=f"r{i}", clock=c)
        for i, c in enumerate([SystemClock(), SystemClock(skew=timedelta(seconds=2.5))])
    ]

    def fire(g: Guard) -> None:
        while not stop.wait(0.2):
            with g.claim() as run:
                if run:
                    with lock:
                        ran.append((run.tick, time.time()))

    for g in guards:
        with g.claim():
            pass  # a first response: the guard's estimate of the server's clock starts
    with lock:
        ran.clear()
    threads = [threading.Thread(target=fire, args=(g,)) for g in guards]
    for t in threads:
        t.start()
    time.sleep(8)
    stop.set()
    for t in threads:
        t.join()
    early = [(t.isoformat(), round(t.timestamp() - at, 2)) for t, at in ran]
    assert [e for e in early if e[1] > 1] == []  # no body started a second before its tick
    ticks = sorted(t for t, _ in ran)
    assert len(set(ticks)) == len(ticks)
    every = Schedule.parse("@every 1s").ticks_between(ticks[0], ticks[-1], limit=50)
    assert [t for t in every if t not in set(ticks)] == []
