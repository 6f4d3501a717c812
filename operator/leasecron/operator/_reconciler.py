"""The reconcile loop: computes every job's status from the caches with the plain functions
of `_plan` / `_jobstatus`, carries out what they decide, and patches status only when it
changed.

A job is reconciled when something it depends on changed (its object, its Lease, its JobRuns,
its group's members: `World` reports these) or when time alone can change it (`recheck_at`).
Jobs go through a deduplicating work queue served by a bounded number of workers, so a burst
of work on many jobs never holds up the others, and a job with nothing to do costs nothing.

Token floors (`coordination.floors`): a job Lease is created at the job's token floor, so its
first grant continues the job's tokens; a coordinated job whose Lease has handed out a token
carries the finalizer `leasecron.dev/token-floor`, and on deletion its last token (Lease,
JobRuns, status) is recorded on the namespace's floors Lease before the finalizer is removed.
A record that keeps failing holds the deletion for at most `finalize_limit_s`, then the
finalizer goes anyway (logged as an error). A job Lease seen deleted has its last token
recorded too.

Writes go through the fenced `Writer`; a `Fenced` write ends the loop. API errors are logged
and the job is retried a second later. What it does not promise: that a missed-run count is
exact across a crash between recording a Missed JobRun and writing the status (it may then
count that tick one time less).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from leasecron._logs import get_logger
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Conflict, KubeError
from leasecron.models.clocks import Clock
from leasecron.models.names import format_tick
from leasecron.models.requests import expiry_message, expiry_patch, read_request
from leasecron.operator import _bodies, _metrics
from leasecron.operator import _conditions as c
from leasecron.operator._facts import Invalid, JobFacts
from leasecron.operator._floors import FINALIZE_LIMIT_S, FloorKeeper
from leasecron.operator._handovers import finish_unclaimed, hand_over
from leasecron.operator._jobstatus import desired_status, invalid_status, status_patch
from leasecron.operator._missed import (
    DEFAULT_RECORD_GRACE,
    Memory,
    initial_memory,
    missed_message,
)
from leasecron.operator._observed import Snapshot
from leasecron.operator._plan import JobPlan, plan_job
from leasecron.operator._world import Key, World
from leasecron.operator._writes import Fenced, Writer

_log = get_logger("leasecron.operator")
RETRY_S = 1.0


class Reconciler:
    """Keeps the status of every cached ScheduledJob, while this process is the leader.

    A work queue as controllers have it: a job marked dirty is queued once; `concurrency`
    workers take jobs from the queue, one job is never reconciled twice at the same time
    (a job marked while it is reconciled is queued again afterwards), and a timer queues the
    jobs whose `recheck_at` has come.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        namespaces: Sequence[str],
        clock: Clock,
        identity: str,
        may_write: Callable[[], bool],
        interval: float = 1.0,
        concurrency: int = 16,
        record_grace: timedelta = DEFAULT_RECORD_GRACE,
        finalize_limit_s: float = FINALIZE_LIMIT_S,
    ) -> None:
        self._record_grace = record_grace
        self._clock = clock
        self._identity = identity
        self._interval = interval
        self._concurrency = concurrency
        self.writer = Writer(kube, may_write=may_write)
        self.floors = FloorKeeper(kube, self.writer, clock=clock, limit_s=finalize_limit_s)
        self.world = World(
            kube,
            namespaces=namespaces,
            clock=clock,
            on_dirty=self.mark,
            on_lease_gone=self._lease_gone,
        )
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._again: set[Key] = set()
        self._due: dict[Key, float] = {}
        self._memory: dict[str, Memory] = {}
        self._unwritten_missed: dict[str, int] = defaultdict(int)
        self._statuses_changed = True
        self.reconciled = 0

    # --- inputs -----------------------------------------------------------------------

    def mark(self, key: Key) -> None:
        """Queue `key` for reconciling (once, however often it is marked)."""
        if key in self._active:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def job_event(self, kind: str | None, obj: Mapping[str, Any]) -> None:
        """A ScheduledJob watch event (from kopf): ADDED/MODIFIED/None update, DELETED drop."""
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if kind == "DELETED":
            self.world.remove_job(key)
            self._due.pop(key, None)
            self._memory.pop(str(metadata.get("uid") or ""), None)
            self._statuses_changed = True
            return
        self.world.upsert_job(obj)

    # --- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile forever (until cancelled, or a write is fenced)."""
        workers = [self._work() for _ in range(self._concurrency)]
        await asyncio.gather(self._timer(), *workers)

    async def _timer(self) -> None:
        """Queue due jobs; refresh the per-condition job counts."""
        while True:
            now = self._clock.monotonic()
            for key in [key for key, at in self._due.items() if at <= now]:
                del self._due[key]
                self.mark(key)
            if self._statuses_changed:
                self._statuses_changed = False
                statuses = [obj.get("status") or {} for obj in self.world.jobs.values()]
                _metrics.record_conditions(statuses)
                _metrics.record_last_success(self.world.jobs)
            upcoming = min(self._due.values(), default=now + self._interval)
            await asyncio.sleep(min(max(upcoming - now, 0.01), self._interval))

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                await self._guarded(key)
            finally:
                self._active.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.mark(key)

    async def _guarded(self, key: Key) -> None:
        started = self._clock.monotonic()
        try:
            await self.reconcile(key)
        except Fenced:
            raise
        except KubeError as e:
            _log.warning("reconcile failed", namespace=key[0], job=key[1], error=repr(e))
            self._due[key] = self._clock.monotonic() + RETRY_S
        except Exception:
            _log.exception("reconcile crashed", namespace=key[0], job=key[1])
            self._due[key] = self._clock.monotonic() + RETRY_S
        finally:
            self.reconciled += 1
            _metrics.RECONCILE_DURATION.observe(self._clock.monotonic() - started)

    # --- one job ----------------------------------------------------------------------

    async def reconcile(self, key: Key) -> None:
        """Compute one job's status, act on the plan, patch the status if it changed."""
        obj = self.world.jobs.get(key)
        if obj is None:
            return
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            if not await self.floors.finalize(key, obj):
                self._due[key] = self._clock.monotonic() + RETRY_S
            return
        facts = self.world.facts(key)
        previous: Mapping[str, Any] = obj.get("status") or {}
        if isinstance(facts, Invalid):
            desired = invalid_status(invalid=facts, previous=previous, now=self._clock.now())
            await self._write_status(key, previous, desired)
            self._due.pop(key, None)
            return
        now, now_mono = self._clock.now(), self._clock.monotonic()
        snapshot = self.world.snapshot(facts, now=now, now_mono=now_mono)
        conditions = c.conditions_by_type(previous.get("conditions"))
        memory = self._memory.get(facts.ref.uid) or initial_memory(
            facts,
            previous=conditions,
            now=now,
            now_mono=now_mono,
            observed_generation=previous.get("observedGeneration"),
        )
        plan = plan_job(
            facts, snapshot, memory, previous=conditions, record_grace=self._record_grace
        )
        complete = await self._act(facts, plan)
        snapshot = self.world.snapshot(facts, now=now, now_mono=now_mono)  # with our writes
        uid = facts.ref.uid
        missed_runs = int(previous.get("missedRuns") or 0) + self._unwritten_missed[uid]
        desired = desired_status(
            facts=facts,
            snapshot=snapshot,
            previous=previous,
            on_schedule=plan.expectation.condition,
            missed_runs=missed_runs,
            ticks=plan.expectation.memory.current,
        )
        await self._write_status(key, previous, desired)
        self._unwritten_missed.pop(uid, None)
        created = True
        if plan.create_lease:  # after the status, which is what people wait for
            created = await self._create_lease(self.world.jobs.get(key) or obj, facts, snapshot)
        await self.floors.hold(self.world.jobs.get(key) or obj, facts, snapshot)
        next_memory = plan.expectation.memory
        if not complete:
            next_memory = replace(next_memory, checked_through=memory.checked_through)
        self._memory[uid] = next_memory
        retry = now_mono + RETRY_S
        again = complete and created
        self._due[key] = plan.recheck_at if again else min(plan.recheck_at, retry)

    async def _write_status(
        self, key: Key, previous: Mapping[str, Any], desired: dict[str, Any]
    ) -> None:
        patch = status_patch(previous, desired)
        if patch is None:
            return
        namespace, name = key
        _log.debug("patching status", namespace=namespace, job=name, fields=sorted(patch))
        updated = await self.writer.patch_status(namespace=namespace, name=name, status=patch)
        self._statuses_changed = True
        if updated:
            self.world.upsert_job(updated, quiet=True)

    async def _act(self, facts: JobFacts, plan: JobPlan) -> bool:
        """Carry out the plan's writes (but the Lease: after the status); False when a missed
        tick could not be recorded."""
        complete = await self._record_missed(facts, plan)
        if plan.expectation.gap_alarm:
            await self._alarm(facts, plan.expectation.condition.message)
            self._unwritten_missed[facts.ref.uid] += 1
        for run in plan.history.abandoned:
            await self._abandon(facts, run.name, run.holder)
        for run, owed in plan.history.handed_over:
            await hand_over(self.writer, self.world, facts, run, owed)
        for run, owed in plan.history.unclaimed:
            await finish_unclaimed(self.writer, self.world, facts, run, owed, now=self._clock.now())
        for run in plan.history.expired:
            await self._expire(facts, run.name)
        for run in plan.history.prune:
            await self.writer.delete_run(namespace=facts.ref.namespace, name=run.name)
            self.world.forget_run(facts.ref.namespace, facts.ref.name, run.name)
            _metrics.PRUNED.labels(
                job_namespace=facts.ref.namespace, scheduled_job=facts.ref.name
            ).inc()
            _log.debug(
                "pruned run",
                namespace=facts.ref.namespace,
                job=facts.ref.name,
                run=run.name,
                outcome=run.outcome,
            )
        return complete

    async def _create_lease(
        self, obj: Mapping[str, Any], facts: JobFacts, snapshot: Snapshot
    ) -> bool:
        """Create the job's Lease at its token floor; False (logged) when the floor could not
        be read or the Lease not written: no Lease is created below the floor."""
        ns, job = facts.ref.namespace, facts.ref.name
        try:
            floor = await self.floors.lease_floor(obj, facts, snapshot)
            await self.writer.create_job_lease(facts, transitions=floor)
            _log.debug("created job lease", namespace=ns, job=job, floor=floor)
        except AlreadyExists:
            _log.debug("job lease exists", namespace=ns, job=job)
        except KubeError as e:
            _log.warning("could not create the job's lease", namespace=ns, job=job, error=repr(e))
            return False
        self.floors.lease_created(ns, job)
        return True

    def _lease_gone(self, namespace: str, job: str, token: int) -> None:
        exists = (namespace, job) in self.world.jobs
        self.floors.lease_gone(namespace, job, token, job_exists=exists)

    async def _record_missed(self, facts: JobFacts, plan: JobPlan) -> bool:
        ns, job = facts.ref.namespace, facts.ref.name
        expectation = plan.expectation
        for tick in expectation.new_missed:
            message = missed_message(
                facts,
                tick,
                claimed=tick in expectation.unrun_claims,
                grace=expectation.record_grace,
                shard_lease=expectation.shard_lease,
            )
            body = _bodies.missed_run(facts, tick=tick, now=self._clock.now(), message=message)
            try:
                self.world.note_run(await self.writer.create_run(namespace=ns, body=body))
            except AlreadyExists:
                continue  # recorded already (by a replica's catch-up, or before a failover)
            except KubeError as e:
                _log.warning(
                    "could not record missed run",
                    namespace=ns,
                    job=job,
                    tick=format_tick(tick),
                    error=repr(e),
                )
                return False
            await self._alarm(facts, f"Job {job}: {message}")
            self._unwritten_missed[facts.ref.uid] += 1
        for tick in expectation.recorded_elsewhere:
            message = f"tick {format_tick(tick)} did not run; a replica recorded it as Missed."
            await self._alarm(facts, f"Job {job}: {message}")
            self._unwritten_missed[facts.ref.uid] += 1
        return True

    async def _alarm(self, facts: JobFacts, message: str) -> None:
        ns, job = facts.ref.namespace, facts.ref.name
        _metrics.MISSED.labels(job_namespace=ns, scheduled_job=job).inc()
        _log.warning("missed run", namespace=ns, job=job, message=message)
        body = _bodies.warning_event(
            facts.ref,
            reason=c.REASON_MISSED_RUN,
            message=message,
            now=self._clock.now(),
            reporter=self._identity,
        )
        try:
            await self.writer.create_event(namespace=ns, body=body)
        except KubeError as e:  # the alarm is also in status, metrics and logs
            _log.warning("could not post event", namespace=ns, job=job, error=repr(e))

    async def _expire(self, facts: JobFacts, name: str) -> None:
        """Finish a request nobody picked up as `Missed`, conditional on the version seen (a
        replica's pickup wins over the expiry)."""
        ns = facts.ref.namespace
        obj = self.world.run_object(ns, name)
        request = read_request(obj) if obj is not None else None
        if request is None or not request.pending:
            return
        message = expiry_message(
            request, handler=facts.handler, starting_deadline=facts.starting_deadline
        )
        patch = expiry_patch(request, end=self._clock.now(), message=message)
        try:
            self.world.note_run(await self.writer.patch_run(namespace=ns, name=name, patch=patch))
        except Conflict:
            return  # picked up (or changed) meanwhile: judged again next pass
        _log.warning("run request expired", namespace=ns, job=facts.ref.name, run=name)
        await self._alarm(facts, f"Job {facts.ref.name}: {name}: {message}")

    async def _abandon(self, facts: JobFacts, name: str, holder: str) -> None:
        ns = facts.ref.namespace
        obj = self.world.run_object(ns, name)
        message = (
            f"Holder {holder or '(none)'} vanished while the run was going: its grant on the "
            f"Lease expired without a release and its member Lease is gone."
        )
        patch = (
            _bodies.abandoned_patch(obj, now=self._clock.now(), message=message) if obj else None
        )
        if patch is None:
            return
        try:
            self.world.note_run(await self.writer.patch_run(namespace=ns, name=name, patch=patch))
        except Conflict:
            return  # the run changed (its holder finished it): judged again next pass
        _metrics.ABANDONED.labels(job_namespace=ns, scheduled_job=facts.ref.name).inc()
        _log.warning("run abandoned", namespace=ns, job=facts.ref.name, run=name, holder=holder)
