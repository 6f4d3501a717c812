"""`run_once`: one run of one job, now, exactly as a replica would run it: for tests of a
handler against a real cluster, and for a manual trigger.

A once-per-tick job claims `tick` through the claim engine (its shard's Lease), runs and
records it, and releases; an every-replica job runs locally; a
single-owner job runs one ownership term until the handler returns (or `timeout`, then it is
stopped and its Lease released). The tick's starting deadline is not applied: the run is
asked for explicitly. It starts only what one run needs (the Lease cache, a member Lease for
the duration of the call) and stops it after. What it does not do: run while the same
Scheduler is running (they would share a member Lease), or retry a claim someone else won.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leasecron.kube.errors import AlreadyExists
from leasecron.kube.jobruns import ScheduledJobStore
from leasecron.models.specs import Bucket, Outcome, ScheduledJob
from leasecron.runtime._core import Runtime
from leasecron.runtime._invoke import RunControl, StopReason
from leasecron.runtime._owner import OwnerWorker
from leasecron.runtime._records import RunOutcome
from leasecron.runtime._services import Services
from leasecron.runtime._shards import ShardTicks
from leasecron.runtime._tick_records import RecordMode


@dataclass(frozen=True)
class RunResult:
    """What `run_once` did: the tick it asked for and, for each run that happened (catch-up
    can add runs of missed ticks before it), how it ended. `outcome` is that of the asked
    tick's run (of the term for single-owner jobs), None when this replica did not run it
    (another holder had the tick)."""

    job: str
    tick: datetime
    runs: tuple[RunOutcome, ...]

    @property
    def outcome(self) -> Outcome | None:
        last = self.runs[-1] if self.runs else None
        return last.outcome if last is not None else None

    @property
    def message(self) -> str:
        return self.runs[-1].message if self.runs else ""


async def run_once(
    runtime: Runtime,
    job: str | Mapping[str, Any],
    *,
    tick: datetime | None,
    timeout: float,  # noqa: ASYNC109 - a bound on the run, not on one await
) -> RunResult:
    """Run `job` (a name, or a manifest created when missing) once; see the module doc."""
    async with runtime.resources() as services:
        obj = await _resource(services, job)
        scheduled = ScheduledJob.from_resource(obj)
        if scheduled.handler_name not in services.registry:
            raise KeyError(f"handler {scheduled.handler_name!r} is not registered")
        asked = tick or _default_tick(services, scheduled)
        seen: list[RunOutcome] = []
        recorded = asyncio.Event()

        def note(run: RunOutcome) -> None:
            seen.append(run)
            recorded.set()

        services.recorder.listeners.append(note)
        await services.lease_cache.start()
        await services.membership.start()
        try:
            await asyncio.wait_for(_run(services, scheduled, asked, recorded), timeout)
        except TimeoutError:
            pass
        finally:
            await services.membership.stop()
            await services.lease_cache.stop()
        return RunResult(job=scheduled.name, tick=asked, runs=tuple(seen))


async def _resource(services: Services, job: str | Mapping[str, Any]) -> dict[str, Any]:
    store = ScheduledJobStore(services.kube)
    if isinstance(job, str):
        found = await store.get(namespace=services.namespace, name=job)
        if found is None:
            raise LookupError(f"ScheduledJob {services.namespace}/{job} does not exist")
        return found
    body = {**job, "metadata": {**job.get("metadata", {}), "namespace": services.namespace}}
    try:
        return await store.create(namespace=services.namespace, body=body)
    except AlreadyExists:
        found = await store.get(namespace=services.namespace, name=body["metadata"]["name"])
        assert found is not None
        return found


def _default_tick(services: Services, job: ScheduledJob) -> datetime:
    now = services.clock.now()
    schedule = job.spec.parsed_schedule
    latest = schedule.latest_at_or_before(now) if schedule is not None else None
    return latest or now


async def _run(
    services: Services, job: ScheduledJob, tick: datetime, recorded: asyncio.Event
) -> None:
    if job.spec.bucket is Bucket.SINGLE_OWNER:
        await _one_term(services, job, recorded)
        return
    if job.spec.bucket is Bucket.EVERY_REPLICA:
        await services.run_tick(job, tick, RunControl(), fence=None, record=RecordMode.NONE)
        return
    ticks = ShardTicks(services, shards=services.shards)
    try:
        if await ticks.run_now(job, tick):
            await services.recorder.flush(timeout=services.grace_period)
    finally:
        await ticks.close(StopReason.STOPPING)


async def _one_term(services: Services, job: ScheduledJob, recorded: asyncio.Event) -> None:
    worker = OwnerWorker(services, job)
    worker.start()
    try:
        await recorded.wait()  # the handler returned by itself and its term was recorded
    finally:
        await worker.stop(StopReason.STOPPING)
