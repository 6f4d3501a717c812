"""Replicas whose wall clocks disagree read the API server's clock (`Tuning.store_time`,
docs/design.md §5.17): a replica whose clock runs ahead neither claims a tick before it has
come nor, by claiming the next tick first, takes the tick before it from everyone."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.clocks import SystemClock
from leasecron.models.schedules import Schedule
from leasecron.runtime import Tuning
from leasecron.testing import apply_manifests
from leasecron.testing.handlers import scheduled_job

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0)
SKEWS = (-3.0, 0.0, 3.0)
REPLICAS = len(SKEWS)
EARLY = 1.0
"""How early (by the true clock) a start may be: the estimate's width, and more."""


def test_replicas_with_skewed_clocks_run_every_tick_once_and_none_before_its_time(
    kubes: list[Kube], kube_api: Any, namespace: str
) -> None:
    manifest = scheduled_job("skewed", schedule="@every 2s", startingDeadline="1500ms")
    apply_manifests(kube_api, [manifest], namespace=namespace)
    starts: list[tuple[datetime, float, float]] = []
    lock = threading.Lock()

    def run(skew: float) -> Any:
        def handler(ctx: JobContext) -> None:
            with lock:
                starts.append((ctx.tick, time.time(), skew))

        return handler

    schedulers = []
    for kube, skew in zip(kubes, SKEWS, strict=True):
        clock = SystemClock(skew=timedelta(seconds=skew))
        scheduler = Scheduler(namespace=namespace, kube=kube, clock=clock, tuning=FAST)
        scheduler.register("skewed", run(skew))
        schedulers.append(scheduler)
    for scheduler in schedulers:
        scheduler.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            with lock:
                if len(starts) >= 10:
                    break
            time.sleep(0.2)
    finally:
        for scheduler in schedulers:
            scheduler.stop()
    assert len(starts) >= 10, starts
    early = [(t.isoformat(), round(t.timestamp() - at, 2), s) for t, at, s in starts]
    assert [e for e in early if e[1] > EARLY] == []  # no tick started before its time
    ticks = sorted(t for t, _, _ in starts)
    assert len(set(ticks)) == len(ticks)  # each once
    # Every tick from the second one run to the last ran: none was taken and run by nobody.
    expected = Schedule.parse("@every 2s").ticks_between(ticks[1], ticks[-1], limit=100)
    assert [t for t in expected if t not in set(ticks)] == []
