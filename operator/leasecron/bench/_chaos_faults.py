"""The chaos soak's driver: one fault at a time, chosen and timed by a seeded random generator,
each written into the timeline when it is healed.

Fault kinds (`KINDS`):

- `kill`: SIGKILL a replica, start a replacement (new pod, new skew) 0.5-3 s later.
- `stop`: SIGSTOP the holder of a job Lease (a once-per-tick run in progress, else the
  single-owner's owner) for its grant + 1-3 s, then SIGCONT.
- `apiserver`, `etcd`: stop that control-plane process for 2-8 s, then start it again.
- `partition`: close one replica's Toxiproxy proxy for 3-12 s, then heal it.
- `lost_reply`, `status_503`: for 4-12 s, one replica's claim writes (Lease updates of one
  coordinated job) land with their reply lost / are answered 503, a few times.

Every replica is started with its wall clock off by up to `MAX_SKEW` seconds either way (a
`start` entry in the timeline). The first faults go through every kind once (shuffled), so a
short run still sees each. Owns the choice and timing of faults; the same seed on the same
machine gives the same sequence of choices, not the same interleavings.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leasecron.bench._chaos_fleet import ChaosReplica, Fleet
from leasecron.models.names import job_lease_name
from leasecron.testing import ControlPlane
from leasecron.testing.faults import Action, Fault

KINDS = ("kill", "stop", "apiserver", "etcd", "partition", "lost_reply", "status_503")
MAX_SKEW = 3.0
_RESTART_TIMEOUT = 180.0

Holders = Callable[[], dict[str, str]]
"""Job -> the identity holding its Lease now (empty when free); {} when unreadable."""


@dataclass(kw_only=True)
class FaultRecord:
    """One fault: what, on whom, from `start` to `end` (bench wall time)."""

    kind: str
    start: float
    end: float = 0.0
    target: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, *, origin: float) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at_s": round(self.start - origin, 2),
            "duration_s": round(max(0.0, self.end - self.start), 2),
            "target": self.target,
            **self.detail,
        }


class Driver:
    """Injects faults until `until` (wall time); `timeline` holds what it did."""

    def __init__(
        self,
        *,
        rng: random.Random,
        fleet: Fleet,
        plane: ControlPlane,
        holders: Holders,
        grants: dict[str, float],
        single_owner: str,
        gap: tuple[float, float],
        kinds: tuple[str, ...] = KINDS,
        say: Callable[[str], None],
    ) -> None:
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            raise ValueError(f"fault kinds must be among {', '.join(KINDS)}, got {kinds!r}")
        self._rng = rng
        self._fleet = fleet
        self._plane = plane
        self._holders = holders
        self._grants = grants  # coordinated job -> its grant, s (atMostFor / leaseDuration)
        self._single_owner = single_owner
        self._gap = gap
        self._kinds = kinds
        self._say = say
        self.timeline: list[FaultRecord] = []
        self._halt = threading.Event()
        self._queue: list[str] = []

    def skew(self) -> float:
        return round(self._rng.uniform(-MAX_SKEW, MAX_SKEW), 3)

    def start_replica(self) -> ChaosReplica:
        skew = self.skew()
        replica = self._fleet.start(skew=skew)
        now = time.time()
        self.timeline.append(
            FaultRecord(kind="start", start=now, end=now, target=replica.pod, detail={"skew": skew})
        )
        return replica

    def run(self, *, until: float) -> None:
        """Inject faults one after another; the last one is healed before `until`."""
        while True:
            pause = self._rng.uniform(*self._gap)
            if time.time() + pause + 15.0 > until or self._halt.wait(pause):
                return
            if not self._queue:
                self._queue = list(self._kinds)
                self._rng.shuffle(self._queue)
            kind = self._queue.pop()
            record = FaultRecord(kind=kind, start=time.time())
            getattr(self, f"_{kind}")(record)
            record.end = record.end or time.time()
            self.timeline.append(record)
            self._say(f"fault {kind} {record.target} {record.detail} healed")

    def halt(self) -> None:
        self._halt.set()

    def _victim(self) -> ChaosReplica | None:
        running = sorted(self._fleet.running(), key=lambda r: r.pod)
        return self._rng.choice(running) if running else None

    def _hold(self, low: float, high: float) -> float:
        seconds = round(self._rng.uniform(low, high), 2)
        self._halt.wait(seconds)
        return seconds

    def _kill(self, record: FaultRecord) -> None:
        victim = self._victim()
        if victim is None:
            return
        record.target = victim.pod
        record.start = time.time()
        self._fleet.kill(victim)
        self._hold(0.5, 3.0)
        record.end = time.time()
        record.detail["replacement"] = self.start_replica().pod

    def _stop(self, record: FaultRecord) -> None:
        job, victim = self._holder()
        if victim is None:
            record.detail["skipped"] = "no holder found"
            return
        record.target, record.detail["job"] = victim.pod, job
        record.start = time.time()
        victim.signal(signal.SIGSTOP)
        grant = self._grants.get(job, 3.0)
        record.detail["stopped_s"] = self._hold(grant + 1.0, grant + 3.0)
        victim.signal(signal.SIGCONT)

    def _holder(self) -> tuple[str, ChaosReplica | None]:
        """A job and the replica holding its Lease: a once-per-tick holder if one shows up
        within 3 s (runs are short), else whoever holds anything."""
        deadline = time.monotonic() + 3.0
        fallback: tuple[str, ChaosReplica | None] = ("", None)
        while time.monotonic() < deadline:
            for job, identity in sorted(self._holders().items()):
                replica = self._fleet.by_identity(identity) if identity else None
                if replica is None or not replica.alive():
                    continue
                if job != self._single_owner:
                    return job, replica
                fallback = (job, replica)
            time.sleep(0.05)  # another process's Lease: polled
        return fallback

    def _apiserver(self, record: FaultRecord) -> None:
        record.target = "kube-apiserver"
        self._plane.stop_apiserver()
        record.detail["down_s"] = self._hold(2.0, 8.0)
        self._plane.start_apiserver(timeout=_RESTART_TIMEOUT)

    def _etcd(self, record: FaultRecord) -> None:
        record.target = "etcd"
        self._plane.stop_etcd()
        record.detail["down_s"] = self._hold(2.0, 8.0)
        self._plane.start_etcd(timeout=_RESTART_TIMEOUT)

    def _partition(self, record: FaultRecord) -> None:
        victim = self._victim()
        if victim is None:
            return
        record.target = victim.pod
        victim.proxy.partition()
        try:
            record.detail["partitioned_s"] = self._hold(3.0, 12.0)
        finally:
            victim.proxy.heal()

    def _lost_reply(self, record: FaultRecord) -> None:
        self._request_faults(record, action="lose_reply")

    def _status_503(self, record: FaultRecord) -> None:
        self._request_faults(record, action="status")

    def _request_faults(self, record: FaultRecord, *, action: Action) -> None:
        victim = self._victim()
        if victim is None:
            return
        job = self._rng.choice(sorted(self._grants))
        times = self._rng.randint(1, 4)
        record.target, record.detail["job"], record.detail["times"] = victim.pod, job, times
        fault = Fault(
            verb="update", resource="leases", name=job_lease_name(job), action=action, times=times
        )
        victim.set_faults([fault])
        try:
            record.detail["window_s"] = self._hold(4.0, 12.0)
        finally:
            victim.set_faults([])
