"""Shard claims with replicas as processes against the real API server: short once-per-tick
jobs claimed through two shards by three replicas. No tick runs twice when the shard holder is
SIGKILLed or SIGSTOPped in the middle of an instant, no tick is lost when a replica joins or
leaves, and a job's fencing token never decreases."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from _processes import ReplicaProcess
from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION
from leasecron.models.shards import shard_lease_name
from leasecron.testing.handlers import scheduled_job

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
SCRIPT = Path(__file__).with_name("_runtime_replica.py")
SHARDS = 2
JOBS = [f"short-{i}" for i in range(6)]
SHORT = {"keepAlive": False, "atMostFor": "5s"}


class Replica(ReplicaProcess):
    """One `_runtime_replica.py` process with 2 shards of 2 s Leases."""

    def __init__(
        self,
        index: int,
        *,
        namespace: str,
        kubeconfig: Path,
        workdir: Path,
        changed: threading.Condition,
    ) -> None:
        args = ["--namespace", namespace, "--shards", str(SHARDS), "--shard-lease", "2"]
        super().__init__(
            SCRIPT,
            args,
            name=f"replica-{index}",
            kubeconfig=kubeconfig,
            log_path=workdir / f"replica-{index}.log",
            env={"POD_NAME": f"replica-{index}"},
            changed=changed,
        )
        self.index = index

    def ready(self) -> None:
        self.wait_until(lambda lines: any(x["event"] == "ready" for x in lines), 60.0)

    @property
    def identity(self) -> str:
        return str(self.events("ready")[0]["identity"])

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)
        self.wait_exit(timeout=30)


@pytest.fixture
def start(
    kubeconfig: Path, namespace: str, leasecron_crds: list[str], tmp_path: Path
) -> Iterator[Any]:
    started: list[Replica] = []
    changed = threading.Condition()  # every replica's new lines wake the waits below

    def start_replica(index: int) -> Replica:
        replica = Replica(
            index, namespace=namespace, kubeconfig=kubeconfig, workdir=tmp_path, changed=changed
        )
        started.append(replica)
        replica.ready()
        return replica

    try:
        yield start_replica
    finally:
        for replica in started:
            replica.kill()


def create_jobs(api: Any, namespace: str) -> None:
    objects = client.CustomObjectsApi(api)
    for name in JOBS:
        manifest = scheduled_job(name, schedule="@every 1s", handler="slow", lock=SHORT)
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
        )


def runs(group: list[Replica]) -> list[dict[str, Any]]:
    return [line for r in group for line in r.events("run") if line["job"] in JOBS]


def _on_new_lines(group: list[Replica], until: Callable[[], bool], timeout: float) -> bool:
    """Re-check `until()` whenever a replica of `group` prints a line (a killed or stopped one
    among them is no failure here); False when `timeout` passes first."""
    changed = group[0]._changed
    deadline = time.monotonic() + timeout
    with changed:
        while not until():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            changed.wait(remaining)
    return True


def wait_runs(group: list[Replica], *, after: float, ticks: int) -> None:
    """Until every job ran `ticks` ticks later than `after` (wall time of the tick)."""

    def enough() -> bool:
        later = Counter(r["job"] for r in runs(group) if _ts(r["tick"]) > after)
        return all(later[name] >= ticks for name in JOBS)

    assert _on_new_lines(group, enough, ticks * 3 + 30), (
        f"fewer than {ticks} ticks per job after {after}"
    )


def holder_of(api: Any, namespace: str, shard: int) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease(
        shard_lease_name("default", shard, shards=SHARDS), namespace
    )
    return str(lease.spec.holder_identity or "")


def mid_instant(group: list[Replica], api: Any, namespace: str) -> Replica:
    """A replica that holds a shard and started a run less than 0.3 s ago (so it is in the
    middle of that instant's half-second runs)."""
    found: list[Replica] = []

    def caught() -> bool:
        # Looked at whenever a replica prints (a run starting is a line): the Lease reads
        # only then.
        fresh = [r for r in group if any(time.time() - x["t"] < 0.3 for x in r.events("run"))]
        if fresh:
            holders = {holder_of(api, namespace, s) for s in range(SHARDS)}
            found.extend(r for r in fresh if r.identity in holders)
        return bool(found)

    assert _on_new_lines(group, caught, 30), "no shard holder caught in the middle of an instant"
    return found[0]


def check_once_and_fenced(group: list[Replica]) -> list[dict[str, Any]]:
    """No (job, tick) ran twice; per job, tokens never decrease as ticks go on."""
    seen = runs(group)
    per_tick = Counter((r["job"], r["tick"]) for r in seen)
    assert max(per_tick.values()) == 1, [k for k, n in per_tick.items() if n > 1]
    for name in JOBS:
        ordered = sorted((r["tick"], r["token"]) for r in seen if r["job"] == name)
        tokens = [token for _, token in ordered]
        assert all(t is not None for t in tokens)
        assert all(a < b for a, b in itertools.pairwise(tokens)), (name, ordered)
    return seen


def missing_ticks(seen: list[dict[str, Any]], *, first: float, last: float) -> dict[str, int]:
    """Per job, the ticks in [first, last] (wall seconds) that did not run."""
    missing: dict[str, int] = {}
    for name in JOBS:
        ran = {_ts(r["tick"]) for r in seen if r["job"] == name}
        expected = {first + k for k in range(int(last - first) + 1)}
        missing[name] = len(expected - ran)
    return missing


def test_no_tick_runs_twice_when_the_shard_holder_is_killed_or_stopped_mid_instant(
    start: Any, kube_api: Any, namespace: str
) -> None:
    group: list[Replica] = [start(i) for i in range(3)]
    create_jobs(kube_api, namespace)
    wait_runs(group, after=0, ticks=3)
    victim = mid_instant(group, kube_api, namespace)
    victim.kill()
    killed_at = time.time()
    alive = [r for r in group if r is not victim]
    wait_runs(alive, after=killed_at + 1, ticks=3)
    stopped = mid_instant(alive, kube_api, namespace)
    stopped.signal(signal.SIGSTOP)
    stopped_at = time.time()
    others = [r for r in alive if r is not stopped]
    wait_runs(others, after=stopped_at + 1, ticks=4)  # past the 2 s shard Lease
    stopped.signal(signal.SIGCONT)
    wait_runs(alive, after=time.time() + 1, ticks=3)
    for replica in alive:
        replica.terminate()
    seen = check_once_and_fenced(group)
    first = max(min(_ts(r["tick"]) for r in seen if r["job"] == name) for name in JOBS)
    last = min(max(_ts(r["tick"]) for r in seen if r["job"] == name) for name in JOBS)
    # The others take the shards once the dead or stopped holder's 2 s grant expires, and
    # run the instants they waited for then (late, within startingDeadline). Only an instant
    # the holder had claimed and not started can be lost (and is alarmed as missed).
    lost = missing_ticks(seen, first=first, last=last)
    assert all(n <= 1 for n in lost.values()), lost
    print(f"\nticks lost to the SIGKILL and the SIGSTOP, per job: {lost}")


def test_no_tick_is_lost_when_a_replica_joins_or_leaves(
    start: Any, kube_api: Any, namespace: str
) -> None:
    group: list[Replica] = [start(0), start(1)]
    create_jobs(kube_api, namespace)
    wait_runs(group, after=0, ticks=3)
    group.append(start(2))
    wait_runs(group, after=time.time() + 1, ticks=4)
    leaving = group[0]
    leaving.terminate()
    wait_runs(group[1:], after=time.time() + 1, ticks=4)
    for replica in group[1:]:
        replica.terminate()
    seen = check_once_and_fenced(group)
    first = max(min(_ts(r["tick"]) for r in seen if r["job"] == name) for name in JOBS)
    last = min(max(_ts(r["tick"]) for r in seen if r["job"] == name) for name in JOBS)
    assert last - first >= 10
    assert missing_ticks(seen, first=first, last=last) == dict.fromkeys(JOBS, 0)
    assert {r["holder"] for r in seen} >= {group[1].identity, group[2].identity}


def _ts(tick: str) -> float:
    return datetime.fromisoformat(tick.replace("Z", "+00:00")).timestamp()
