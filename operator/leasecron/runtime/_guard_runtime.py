"""`GuardRuntime`: what the guards of one event loop share, and which runtime a call uses.

Owns, per event loop: the Kube client made from the environment (one, for guards not given a
client), one watch-fed cache of the guard, shard and group-record Leases
(`coordination.lease_informer`) and, for `job=` guards, one ScheduledJob cache, per (client,
namespace), started lazily on first use; one `TickLock` per Lease and identity: a plain
guard's on its own Lease, with one `GuardMarks` per guard Lease (fed by the view's watch of
it: its token floor and high-water mark kept across deletion), a `job=` guard's on its job's
own shard Lease under `ShardRules` (one `GroupRecord` per group, started on first use);
one `Recorder` per (client, namespace); the member Leases of its
job guards (`GuardMembers`, one per client, namespace, group and identity, started by a job
guard's first use); the claims that are held now, so that closing releases them; and the run
hooks of the guards that used it, whose queued events closing waits for (up to `HOOKS_DRAIN`
seconds, like a stopping Scheduler).

Sync callers share one process-wide `BackgroundLoop` and its runtime (`background()`);
async callers get the runtime of their running loop (`for_running_loop()`). `close_guards()`
(also run at exit) releases the grants, deletes the member Leases and stops the caches of
the background runtime and of runtimes on loops running in other threads; `aclose_guards()`
closes the running loop's. No signal handlers are installed. A forked child starts with none
of its parent's runtimes (and, for guards given no identity, an identity of its own). A cache
that cannot be started (store unreachable) raises, and is tried again by the next call.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from leasecron._logs import get_logger
from leasecron.coordination import BackgroundLoop, GroupRecord, TickLock, lease_informer
from leasecron.coordination.resourcelocks import ROLE_SHARD
from leasecron.coordination.shards import ShardRules, shard_labels
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore, ScheduledJobStore
from leasecron.kube.watches import Informer
from leasecron.models.clocks import Clock
from leasecron.models.configs import LockConfig
from leasecron.models.groups import ROLE_GROUP, own_ref
from leasecron.models.names import LABEL_ROLE
from leasecron.models.shards import DEFAULT_SHARDS
from leasecron.models.vocabulary import LEGACY_GUARD
from leasecron.runtime._guard_marks import GuardMarks
from leasecron.runtime._guard_members import GuardMembers
from leasecron.runtime._guard_runs import GuardRun
from leasecron.runtime._guard_settings import GuardSettings
from leasecron.runtime._hooks import RunHooks
from leasecron.runtime._records import Recorder
from leasecron.runtime._tracing import warm

_log = get_logger("leasecron.runtime.guards")
GUARD_SELECTOR = f"{LABEL_ROLE} in ({ROLE_SHARD},{ROLE_GROUP},{LEGACY_GUARD})"
"""The Leases a guard claims on or follows: tick locks (plain guards', shard Leases, and
guard locks earlier versions labelled `guard`), group records."""
START_TIMEOUT = 10.0
"""Seconds a call waits for a cache to start before it skips (store_unavailable)."""
CLOSE_TIMEOUT = 10.0
HOOKS_DRAIN = 5.0
"""Seconds closing waits, in all, for the guards' run hooks to be delivered."""

Key = tuple[int, str]


class GuardRuntime:
    """The shared pieces of the guards of one event loop (create and use it on that loop)."""

    def __init__(self) -> None:
        self._default_kube: Kube | None = None
        self._kubes: dict[int, Kube] = {}
        self._leases: dict[Key, Informer] = {}
        self._jobs: dict[Key, Informer] = {}
        self._starting: dict[tuple[str, Key], asyncio.Lock] = {}
        self._locks: dict[tuple[Any, ...], TickLock] = {}
        self._marks: dict[tuple[int, str, str], GuardMarks] = {}
        self._groups: dict[tuple[int, str, str], GroupRecord] = {}
        self._unwatch: list[Callable[[], None]] = []
        self._recorders: dict[Key, Recorder] = {}
        self._members: dict[tuple[int, str, str, str], GuardMembers] = {}
        self.active: set[GuardRun] = set()
        """Claims held now (released by `close`)."""
        self.observed: weakref.WeakSet[RunHooks] = weakref.WeakSet()
        """The run hooks of the guards that claimed here (drained when closing)."""
        self.closed = False

    def kube(self, given: Kube | None) -> Kube:
        """`given`, or the runtime's own client from the environment (made once)."""
        if given is not None:
            self._kubes[id(given)] = given
            return given
        if self._default_kube is None:
            self._default_kube = Kube.from_config()
            self._kubes[id(self._default_kube)] = self._default_kube
        return self._default_kube

    async def _started(
        self, kind: str, caches: dict[Key, Informer], key: Key, make: Callable[[], Informer]
    ) -> Informer:
        cache = caches.get(key)
        if cache is not None:
            return cache
        lock = self._starting.setdefault((kind, key), asyncio.Lock())
        async with lock:
            cache = caches.get(key)
            if cache is None:
                warm()  # the tracing import, while the first claim starts the caches
                cache = make()
                await asyncio.wait_for(cache.start(), START_TIMEOUT)
                caches[key] = cache
        return cache

    async def lease_cache(self, kube: Kube, namespace: str, clock: Clock) -> Informer:
        """The started cache of `namespace`'s guard Leases (KubeError/TimeoutError when it
        cannot be started now)."""
        return await self._started(
            "leases",
            self._leases,
            (id(kube), namespace),
            lambda: lease_informer(
                kube, namespace=namespace, label_selector=GUARD_SELECTOR, clock=clock
            ),
        )

    async def job_cache(self, kube: Kube, namespace: str, clock: Clock) -> Informer:
        """The started cache of `namespace`'s ScheduledJobs."""
        return await self._started(
            "jobs",
            self._jobs,
            (id(kube), namespace),
            lambda: ScheduledJobStore(kube).informer(namespace=namespace, clock=clock),
        )

    def recorder(self, kube: Kube, namespace: str, clock: Clock) -> Recorder:
        key = (id(kube), namespace)
        recorder = self._recorders.get(key)
        if recorder is None:
            recorder = Recorder(jobruns=JobRunStore(kube), namespace=namespace, clock=clock)
            self._recorders[key] = recorder
        return recorder

    def advertise(
        self, kube: Kube, *, settings: GuardSettings, group: str, handler: str, clock: Clock
    ) -> None:
        """Job guard `settings` runs a job of `group` with `handler`: its identity's member
        Lease of that group lists the handler (the Lease is started on the first call)."""
        namespace, identity = settings.namespace, settings.identity
        key = (id(kube), namespace, group, identity)
        for other, elsewhere in self._members.items():
            if other != key and other[:2] == key[:2] and other[3] == identity:
                elsewhere.withdraw(settings.name)  # the job moved to another group
        members = self._members.get(key)
        if members is None:
            members = GuardMembers(
                kube, namespace=namespace, group=group, identity=identity, clock=clock
            )
            self._members[key] = members
        members.advertise(settings.name, handler)

    def marks(self, kube: Kube, settings: GuardSettings) -> GuardMarks:
        """What this runtime has seen claimed on the guard's Lease (see `GuardMarks`)."""
        return self._marks.setdefault((id(kube), settings.namespace, settings.lease), GuardMarks())

    def seen(self, kube: Kube, namespace: str, lease: str) -> dict[str, Any] | None:
        """The guard Lease `lease` as this runtime's cache for `kube` shows it now (None: not
        there, or no cache yet)."""
        cache = self._leases.get((id(kube), namespace))
        return cache.get(namespace, lease) if cache is not None else None

    def tick_lock(
        self,
        kube: Kube,
        cache: Informer,
        *,
        settings: GuardSettings,
        config: LockConfig,
        clock: Clock,
    ) -> TickLock:
        """The TickLock of a plain guard's Lease for its identity (one per Lease config). The
        Lease is created above the highest token this runtime saw on it."""
        key = (id(kube), settings.namespace, settings.lease, settings.identity, config)
        lock = self._locks.get(key)
        if lock is not None:
            return lock
        marks = self.marks(kube, settings)

        async def floor() -> int:
            return marks.token

        lock = TickLock(
            kube,
            cache,
            config=config,
            job=settings.name,
            namespace=settings.namespace,
            name=settings.lease,
            identity=settings.identity,
            clock=clock,
            floor=floor,
        )
        self._locks[key] = lock
        self._follow(lock, marks, clock)
        return lock

    async def group_record(
        self,
        kube: Kube,
        cache: Informer,
        *,
        namespace: str,
        group: str,
        identity: str,
        clock: Clock,
    ) -> GroupRecord:
        """The started record of `group` (created with the default count when there is
        none: the group's Schedulers follow the record, whatever they were configured with)."""
        key = (id(kube), namespace, group)
        record = self._groups.get(key)
        if record is not None:
            return record
        lock = self._starting.setdefault(
            ("group", (id(kube), f"{namespace}/{group}")), asyncio.Lock()
        )
        async with lock:
            record = self._groups.get(key)
            if record is None:
                record = GroupRecord(
                    kube,
                    cache,
                    namespace=namespace,
                    group=group,
                    identity=identity,
                    configured_shards=DEFAULT_SHARDS,
                    clock=clock,
                )
                try:
                    await asyncio.wait_for(record.start(), START_TIMEOUT)
                except BaseException:
                    record.close()
                    raise
                self._groups[key] = record
        return record

    async def job_lock(
        self,
        kube: Kube,
        cache: Informer,
        *,
        settings: GuardSettings,
        job: str,
        group: str,
        config: LockConfig,
        clock: Clock,
    ) -> TickLock:
        """The TickLock of a `job=` guard on its job's own shard Lease, under the group's
        rules: the claim, its token and its high-water mark are those a Scheduler that
        registered the job makes on that Lease. The job is moved there first when the group
        record does not list it (`GroupRecord.move_job`). Raises GroupRecordError, KubeError."""
        namespace, identity = settings.namespace, settings.identity
        record = await self.group_record(
            kube, cache, namespace=namespace, group=group, identity=identity, clock=clock
        )
        if job not in record.state.own:
            await record.move_job(job)
        ref = own_ref(group, job)
        key = (id(kube), namespace, ref.lease, identity, config)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = TickLock(
                kube,
                cache,
                config=config,
                job=settings.name,
                namespace=namespace,
                name=ref.lease,
                identity=identity,
                clock=clock,
                labels=shard_labels(group, ref),
                rules=ShardRules(record, over_own=False),
            )
        return lock

    def _follow(self, lock: TickLock, marks: GuardMarks, clock: Clock) -> None:
        """Feed `marks` from every version of the lock's Lease the view sees (noting one
        version twice changes nothing)."""
        view = lock.lease.view

        def changed(obj: dict[str, Any] | None) -> None:
            marks.note(view.record_of(obj) if obj is not None else None, now=clock.now())

        seen = lock.lease.observe()
        if seen is not None:
            marks.note(seen.observation.record, now=clock.now())
        self._unwatch.append(view.watch(lock.namespace, lock.name, changed))

    async def close(self) -> None:
        """Release the held claims, stop the caches, close the clients made here."""
        self.closed = True
        for run in list(self.active):
            self.active.discard(run)
            if run.watchdog is not None:
                run.watchdog.cancel()
            with contextlib.suppress(Exception):
                if run.keep_alive is not None:
                    await run.keep_alive.stop()
                if run.grant is not None:
                    await run.grant.release()
        for members in self._members.values():
            await members.stop()
        self._members.clear()
        for recorder in self._recorders.values():
            with contextlib.suppress(Exception):
                await recorder.flush(timeout=2.0)
                await recorder.close()
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch.clear()
        for lock in self._locks.values():
            await lock.close()
        for record in self._groups.values():
            record.close()
        self._groups.clear()
        for cache in [*self._leases.values(), *self._jobs.values()]:
            with contextlib.suppress(Exception):
                await cache.stop()
        self._leases.clear()
        self._jobs.clear()
        self._locks.clear()
        self._recorders.clear()
        if self._default_kube is not None:
            await self._default_kube.close()
            self._default_kube = None


# --- which runtime a call uses -------------------------------------------------------------

_guard = threading.Lock()
_background: BackgroundLoop | None = None
_background_runtime: GuardRuntime | None = None
_loop_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GuardRuntime] = (
    weakref.WeakKeyDictionary()
)


def background() -> tuple[BackgroundLoop, GuardRuntime]:
    """The process-wide loop of sync callers and its runtime (started on first use)."""
    global _background, _background_runtime
    with _guard:
        if _background is None or _background_runtime is None:
            _background = BackgroundLoop(name="leasecron-guards").start()
            _background_runtime = GuardRuntime()
        return _background, _background_runtime


def for_running_loop() -> GuardRuntime:
    """The runtime of the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    with _guard:
        runtime = _loop_runtimes.get(loop)
        if runtime is None or runtime.closed:
            runtime = _loop_runtimes[loop] = GuardRuntime()
        return runtime


async def aclose_guards() -> None:
    """Release the grants and stop the caches of the running loop's guards."""
    loop = asyncio.get_running_loop()
    with _guard:
        runtime = _loop_runtimes.pop(loop, None)
    if runtime is not None:
        await runtime.close()
        deadline = time.monotonic() + HOOKS_DRAIN
        for hooks in list(runtime.observed):
            await hooks.drain(timeout=max(0.0, deadline - time.monotonic()))


def _flush(runtimes: list[GuardRuntime]) -> None:
    """Wait (from a thread that is none of their loops) for the hooks of `runtimes`."""
    deadline = time.monotonic() + HOOKS_DRAIN
    for hooks in {h for runtime in runtimes for h in list(runtime.observed)}:
        hooks.flush(timeout=max(0.0, deadline - time.monotonic()))


def close_guards() -> None:
    """Release every grant the guards of this process hold and stop their caches: the
    background loop of sync callers (stopped too) and the runtimes of loops running in other
    threads. A loop running in this thread is left to `await aclose_guards()`."""
    global _background, _background_runtime
    with _guard:
        loop, runtime = _background, _background_runtime
        _background = _background_runtime = None
        others = list(_loop_runtimes.items())
    if loop is not None and runtime is not None:
        try:
            loop.run(runtime.close(), timeout=CLOSE_TIMEOUT)
        except Exception:
            _log.exception("closing the guards failed")
        _flush([runtime])  # before the loop stops: coroutine hooks run on it
        loop.stop()
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    for other, other_runtime in others:
        if other is current or other.is_closed() or not other.is_running():
            continue
        with _guard:
            _loop_runtimes.pop(other, None)
        future = asyncio.run_coroutine_threadsafe(other_runtime.close(), other)
        with contextlib.suppress(Exception):
            future.result(CLOSE_TIMEOUT)
        _flush([other_runtime])


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads or loops: its guards start afresh
    (the parent's grants stay the parent's)."""
    global _background, _background_runtime, _guard, _loop_runtimes
    _guard = threading.Lock()
    _background = _background_runtime = None
    _loop_runtimes = weakref.WeakKeyDictionary()


atexit.register(close_guards)
os.register_at_fork(after_in_child=_forget_after_fork)
