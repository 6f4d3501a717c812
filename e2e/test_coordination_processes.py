"""Coordination between replicas that are separate processes, against the real API server:
exactly one grant per tick over 300 ticks of 100 ms with increasing fencing tokens, a
replica whose clock is 3 s late never claims a claimed tick, leader failover on SIGKILL and
SIGTERM (soon, and never before the old term could end), and a holder paused by SIGSTOP past
its grant loses it without ever renewing over its successor."""

from __future__ import annotations

import itertools
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api

from _processes import ReplicaProcess

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
SCRIPT = Path(__file__).with_name("_coord_replica.py")
START_WAIT = 60.0
LEASE_DURATION = 2.0  # _coord_replica.FAST and the hold lock's atMostFor
CLOCK_TOLERANCE = 0.05  # between time.time() readings of processes on one host
PERIOD = 0.1  # tick period of the `ticks` cases: short, and one this machine keeps up with


class Replica(ReplicaProcess):
    """One `_coord_replica.py` process; commands go in on stdin."""

    def __init__(self, args: list[str], *, name: str, kubeconfig: Path, log_path: Path) -> None:
        super().__init__(
            SCRIPT, args, name=name, kubeconfig=kubeconfig, log_path=log_path, stdin=True
        )

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any]:
        """The first line matching `predicate`, waiting for it up to `timeout`."""
        self.wait_until(lambda lines: any(predicate(line) for line in lines), timeout)
        return next(line for line in self.lines if predicate(line))


@pytest.fixture
def spawn(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def make(*args: str) -> Replica:
        name = f"replica-{len(started)}"
        replica = Replica(
            list(args), name=name, kubeconfig=kubeconfig, log_path=tmp_path / f"{name}.log"
        )
        started.append(replica)
        return replica

    try:
        yield make
    finally:
        for replica in started:
            replica.kill()


def run_ticks(
    spawn: Callable[..., Replica], namespace: str, *, skews: list[float], count: int, period: float
) -> list[Replica]:
    common = ["--namespace", namespace, "--replicas", str(len(skews))]
    common += ["--count", str(count), "--period", str(period)]
    group = [
        spawn("ticks", *common, "--index", str(i), "--skew", str(skew))
        for i, skew in enumerate(skews)
    ]
    for replica in group:
        replica.wait_for(lambda line: "ready" in line, START_WAIT)
    epoch = time.time() + 0.5
    for replica in group:
        replica.send(repr(epoch))
    finish = count * period + max(0.0, -min(skews)) + 30.0
    for replica in group:
        replica.wait_for(lambda line: "done" in line, finish)
    return group


def grants_of(group: list[Replica]) -> list[tuple[int, int, int]]:
    """(tick index, token, replica index) of every grant, ordered by tick."""
    return sorted(
        (line["grant"], line["token"], index)
        for index, replica in enumerate(group)
        for line in replica.lines
        if "grant" in line
    )


def skips_of(group: list[Replica]) -> dict[int, dict[int, str]]:
    """tick index -> {replica index: the reason it did not get that tick}."""
    skips: dict[int, dict[int, str]] = {}
    for index, replica in enumerate(group):
        for line in replica.lines:
            if "skip" in line:
                skips.setdefault(line["skip"], {})[index] = line["reason"]
    return skips


def unaccounted_ticks(group: list[Replica], count: int) -> dict[int, dict[int, str]]:
    """Ticks that went to nobody without the one reason the protocol allows for that.

    Each run is released at once, so when tick k is due the only grant that can still look
    live is tick k-1's, while its release is on its way through the watch (with 5 replicas
    and 100 ms ticks that happens under CPU starvation). So an ungranted tick must follow a
    granted one, and every replica must have tried it and recorded why it did not get it,
    at least one of them because that grant still looked live (`live_grant`; the others may
    have lost the race (`conflict`) or already seen a later tick (`taken`)).
    """
    granted = {k for k, _, _ in grants_of(group)}
    skips = skips_of(group)
    wrong: dict[int, dict[int, str]] = {}
    for k in range(count):
        if k in granted:
            continue
        reasons = skips.get(k, {})
        allowed = set(reasons.values()) <= {"live_grant", "conflict", "taken"}
        if (
            (k - 1) not in granted
            or set(reasons) != set(range(len(group)))
            or "live_grant" not in reasons.values()
            or not allowed
        ):
            wrong[k] = reasons
    return wrong


def test_five_processes_grant_every_tick_exactly_once_with_rising_tokens(
    spawn: Callable[..., Replica], namespace: str
) -> None:
    count = 240
    group = run_ticks(spawn, namespace, skews=[0.0] * 5, count=count, period=PERIOD)
    grants = grants_of(group)
    per_tick = Counter(k for k, _, _ in grants)
    assert max(per_tick.values()) == 1, [k for k, n in per_tick.items() if n > 1]
    assert set(per_tick) <= set(range(count))
    tokens = [token for _, token, _ in grants]
    assert all(a < b for a, b in itertools.pairwise(tokens)), "tokens must rise"
    writes = sum(line["writes"] for r in group for line in r.lines if "done" in line)
    by_replica = Counter(index for _, _, index in grants)
    ungranted = {k: v for k, v in skips_of(group).items() if k not in per_tick}
    print(
        f"\n{count} ticks x 5 processes: {len(per_tick)} ticks granted "
        f"({len(per_tick) / count:.1%}), {writes / max(1, len(grants)):.2f} writes per run, "
        f"grants per replica {dict(sorted(by_replica.items()))}, ungranted {ungranted}"
    )
    for replica in group:
        print(*(line for line in replica.lines if "done" in line))
    # Every tick was granted, or went to nobody only for the reason the protocol allows.
    assert unaccounted_ticks(group, count) == {}
    # A replica that got a tick did not also record a skip of it, nor skip and grant twice.
    for index, replica in enumerate(group):
        outcomes = Counter(line.get("grant", line.get("skip")) for line in replica.lines)
        outcomes.pop(None, None)
        assert outcomes == Counter(range(count)), f"replica {index} did not try each tick once"
    assert len(by_replica) == 5  # the rendezvous ranks spread the ticks over the replicas


def test_a_replica_whose_clock_is_three_seconds_late_never_claims_a_claimed_tick(
    spawn: Callable[..., Replica], namespace: str
) -> None:
    count = 80  # 8 s of 100 ms ticks: the late replica's first 3 s are all claimed already
    group = run_ticks(spawn, namespace, skews=[0.0, 0.0, -3.0], count=count, period=PERIOD)
    grants = grants_of(group)
    per_tick = Counter(k for k, _, _ in grants)
    assert max(per_tick.values()) == 1
    assert unaccounted_ticks(group[:2], count) == {}
    late = [k for k, _, index in grants if index == 2]
    assert late == []
    # The late replica did try every tick, 3 s after the others, and found each one recorded
    # already (`taken`), rather than never trying or skipping for another reason.
    late_skips = {k: reasons[2] for k, reasons in skips_of(group).items() if 2 in reasons}
    assert late_skips == dict.fromkeys(range(count), "taken")
    done = next(line for line in group[2].lines if "done" in line)
    assert done["skips"]["taken"] >= count


def leaders(group: list[Replica], *, after: float = 0.0) -> list[tuple[float, int, int]]:
    return sorted(
        (line["t"], line["token"], index)
        for index, replica in enumerate(group)
        for line in replica.lines
        if line.get("event") == "started" and line["t"] > after
    )


def wait_new_leader(
    group: list[Replica], *, after: float, timeout: float
) -> tuple[float, int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for replica in group:
            try:
                replica.wait_for(
                    lambda line: line.get("event") == "started" and line["t"] > after, 0.05
                )
            except AssertionError:
                continue
            return leaders(group, after=after)[0]
    raise AssertionError(f"no new leader within {timeout}s")


def last_renewal(kube_api: ApiClient, namespace: str, name: str, holder: str) -> float:
    """The renewTime (wall seconds) of the Lease `name`, which `holder` must still hold."""
    spec = CoordinationV1Api(kube_api).read_namespaced_lease(name, namespace).spec
    assert spec is not None and spec.holder_identity == holder, spec
    assert spec.renew_time is not None
    return float(spec.renew_time.timestamp())


@pytest.mark.parametrize(
    ("signal_number", "bound"),
    [(signal.SIGKILL, LEASE_DURATION + 1.0), (signal.SIGTERM, 1.0)],
    ids=["sigkill", "sigterm"],
)
def test_a_standby_leads_soon_after_the_leader_process_dies_and_never_before_its_term_ends(
    spawn: Callable[..., Replica],
    namespace: str,
    kube_api: ApiClient,
    signal_number: int,
    bound: float,
) -> None:
    group = [spawn("elect", "--namespace", namespace, "--identity", f"e{i}") for i in range(3)]
    for replica in group:
        replica.wait_for(lambda line: "ready" in line, START_WAIT)
    _, token, index = wait_new_leader(group, after=0.0, timeout=START_WAIT)
    killed_at = time.time()
    group[index].signal(signal_number)
    if signal_number == signal.SIGKILL:
        # The dead leader's last renewal, read before anyone can take over (>= 1.5 s away).
        # The leader stamps renewTime before it writes, and a standby starts its expiry clock
        # when it observes that write, so no standby may lead before renewTime + leaseDuration.
        # (A renewal still in flight at the kill would only make the true bound later.)
        renewed = last_renewal(kube_api, namespace, "leasecron-leader-e2e", f"e{index}")
        earliest = renewed + LEASE_DURATION
    else:
        # SIGTERM ends the term (on_stopped_leading) and only then releases the Lease: the
        # successor cannot lead before the old term has stopped.
        group[index].wait_for(lambda line: line.get("event") == "exit", 10.0)
        stopped = [line for line in group[index].lines if line.get("event") == "stopped"]
        assert [line["token"] for line in stopped] == [token]
        earliest = stopped[0]["t"]
    at, new_token, new_index = wait_new_leader(group, after=killed_at, timeout=10.0)
    assert new_index != index
    assert new_token == token + 1
    print(
        f"\nfailover after {signal.Signals(signal_number).name}: {at - killed_at:.3f}s "
        f"(not before {earliest - killed_at:.3f}s)"
    )
    assert at >= earliest - CLOCK_TOLERANCE, "the standby led before the old term could end"
    assert at - killed_at <= bound


def test_a_holder_paused_past_its_grant_loses_it_and_never_renews_over_its_successor(
    spawn: Callable[..., Replica], namespace: str, kube_api: ApiClient
) -> None:
    first = spawn("hold", "--namespace", namespace, "--identity", "first")
    claimed = first.wait_for(lambda line: line.get("event") == "claimed", START_WAIT)
    second = spawn("hold", "--namespace", namespace, "--identity", "second")
    second.wait_for(lambda line: "ready" in line, START_WAIT)
    first.signal(signal.SIGSTOP)
    # Not before the paused grant could expire: the last renewal the paused holder wrote
    # (its renewTime, stamped before the write) plus atMostFor, as observed by the successor.
    renewed = last_renewal(kube_api, namespace, "leasecron-job-hold", "first")
    taken = second.wait_for(lambda line: line.get("event") == "claimed", 10.0)
    assert taken["token"] > claimed["token"]
    assert taken["t"] >= renewed + LEASE_DURATION - CLOCK_TOLERANCE
    first.signal(signal.SIGCONT)
    lost = first.wait_for(lambda line: line.get("event") == "lost", 10.0)
    assert lost["assert_held"].startswith("LostLockError")
    # The successor keeps renewing; the paused holder never wrote over it.
    spec = CoordinationV1Api(kube_api).read_namespaced_lease("leasecron-job-hold", namespace).spec
    assert spec is not None
    assert (spec.holder_identity, spec.lease_transitions) == ("second", taken["token"])
    assert not any(line.get("event") == "lost" for line in second.lines)
