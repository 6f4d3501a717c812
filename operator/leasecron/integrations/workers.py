"""One Scheduler per pod when a web server runs several worker processes in it.

`gunicorn -w 3` and `uvicorn --workers 3` import the application in every worker, so an app
that starts its Scheduler at startup starts three. That is safe (each worker is a replica with
its own identity; the Leases keep once-per-tick and single-owner jobs single) but wasteful:
three member Leases, three watches, three API connections per pod, and every-replica jobs run
three times per pod. With a `PodLock` every worker contends for an advisory `fcntl.flock` on a
file in a pod-local directory; the worker that holds it runs the Scheduler, the others retry
every `interval` seconds, and when the holder dies (even by SIGKILL or the OOM killer) the
kernel drops its lock and another worker takes over. After a graceful release (a worker
recycled by `max_requests`, or pod shutdown, when every worker exits at once) the next holder
first waits `settle` seconds, so that a worker on its way out does not start one for a moment.

Why the lock is safe to rely on: a flock belongs to an open file description and the kernel
releases it when the last descriptor closes, which process death always does, so there is no
stale lock to clean up (unlike a pid file). It is advisory and local: put the file in a
directory only this pod's containers see (an `emptyDir`; `/tmp` of the container by default).
A directory shared by several pods (a hostPath, a ReadWriteMany volume) makes it one Scheduler
per node or per volume instead, and NFS locks are not to be trusted at all. A process forked
from the holder shares its descriptor: forked children close it at once (`os.register_at_fork`),
exec'd children never get it (Python descriptors are close-on-exec). None of these failures
can run a tick twice: the lock only saves resources, the Leases do the coordinating.

If an every-replica job refreshes per-process state (an in-process cache), every worker is a
process with its own copy: run a Scheduler in every worker (no PodLock) for such jobs.

Also owns `stop_at_exit` (stop a scheduler when a WSGI worker exits, before Python waits for
the handler threads) and `note_fork_hazard` (say so when a process forks while its Scheduler
runs, as a `gunicorn --preload` master does). Does not install signal handlers: the server owns
SIGTERM.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import os
import re
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from leasecron import _logs

LOCK_DIR_ENV = "LEASECRON_LOCK_DIR"
_log = _logs.get_logger("leasecron.integrations.workers")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RELEASED = b"released"
_locks: weakref.WeakSet[PodLock] = weakref.WeakSet()
_running: weakref.WeakSet[Startable] = weakref.WeakSet()


class Startable(Protocol):
    """What the helpers need of a Scheduler (its thread mode)."""

    @property
    def identity(self) -> str: ...

    @property
    def running(self) -> bool: ...

    def start(self, *, timeout: float = 60.0) -> None: ...

    def stop(self, *, timeout: float | None = None) -> None: ...


class Named(Protocol):
    @property
    def group(self) -> str: ...

    @property
    def namespace(self) -> str: ...


class PodLock:
    """An advisory, exclusive `flock` on `path`, held by at most one process of the pod.

    `try_acquire` never blocks; the holder writes its pid and `note` (the Scheduler identity)
    into the file for people and tests to read, and "released" when it lets go. A worker that
    takes a lock released that way waits `settle` seconds before it runs anything: at pod
    shutdown every worker exits at once, and one that is exiting too should not start a
    Scheduler for a moment (one whose holder was killed is run at once). Not shared across
    threads of one process."""

    def __init__(self, path: Path | str, *, interval: float = 0.5, settle: float = 2.0) -> None:
        if interval <= 0:
            raise ValueError(f"interval ({interval}) must be positive")
        if settle < 0:
            raise ValueError(f"settle ({settle}) must not be negative")
        self.path = Path(path)
        self.interval = interval
        self.settle = settle
        self.after_release = False
        """Whether the holder before this one released the lock (rather than died)."""
        self._fd: int | None = None
        self._pid = os.getpid()
        _locks.add(self)

    @classmethod
    def for_scheduler(
        cls,
        scheduler: Named,
        *,
        directory: Path | str | None = None,
        interval: float = 0.5,
        settle: float = 2.0,
    ) -> PodLock:
        """The pod lock of `scheduler`'s group: `<directory>/leasecron-<namespace>-<group>.lock`,
        `directory` defaulting to $LEASECRON_LOCK_DIR, else the temporary directory."""
        where = Path(directory or os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir())
        name = _UNSAFE.sub("-", f"leasecron-{scheduler.namespace}-{scheduler.group}")
        return cls(where / f"{name}.lock", interval=interval, settle=settle)

    def __repr__(self) -> str:
        return f"PodLock({str(self.path)!r}, held={self.held})"

    @property
    def held(self) -> bool:
        return self._fd is not None and self._pid == os.getpid()

    def try_acquire(self, *, note: str = "") -> bool:
        """Take the lock if no other process holds it; whether this process holds it now."""
        if self.held:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()
        with contextlib.suppress(OSError):  # the note is for reading, not for the lock
            self.after_release = os.pread(fd, 64, 0).startswith(_RELEASED)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {note}\n".encode(), 0)
        return True

    def release(self) -> None:
        """Let another process take the lock (nothing when this process does not hold it)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, _RELEASED + b"\n", 0)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)  # in a forked child: close only, the parent's lock stays its own

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's descriptor without unlocking it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class OnePerPod:
    """Run `scheduler` (thread mode) in whichever worker of the pod holds `lock`.

    `start()` returns at once: a daemon thread contends for the lock every `lock.interval`
    seconds, starts the scheduler once it holds it and keeps it running (a scheduler that
    ended on its own is started again). `stop()` stops the scheduler (its Leases released)
    and then releases the lock, so another worker can take over at once."""

    def __init__(self, scheduler: Startable, lock: PodLock) -> None:
        self.scheduler = scheduler
        self.lock = lock
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        """Whether this worker holds the pod lock (and so runs the scheduler)."""
        return self.lock.held

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"{self.lock!r} is already contended for by this process")
        self._stopping.clear()
        _logs.defer_to_logging()
        _log.info("contending for the pod lock", lock=str(self.lock.path), pid=os.getpid())
        self._thread = threading.Thread(target=self._run, name="leasecron-pod-lock", daemon=True)
        self._thread.start()

    def stop(self, *, timeout: float | None = None) -> None:
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self.lock.try_acquire(note=self.scheduler.identity):
                try:
                    self._lead()
                finally:
                    self.lock.release()
            self._stopping.wait(self.lock.interval)

    def _lead(self) -> None:
        if self.lock.after_release and self._stopping.wait(self.lock.settle):
            return  # this process is stopping too
        _log.info(
            "pod lock taken; starting the scheduler", lock=str(self.lock.path), pid=os.getpid()
        )
        try:
            self.scheduler.start()
        except Exception:
            _log.exception("the scheduler could not start; releasing the pod lock")
            return
        while not self._stopping.wait(self.lock.interval):
            if not self.scheduler.running:
                _log.error("the scheduler ended on its own; starting it again")
                with contextlib.suppress(Exception):
                    self.scheduler.start()
        self.scheduler.stop()


async def lead_when_locked(
    lock: PodLock,
    *,
    note: str,
    run: Callable[[asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
) -> None:
    """asyncio form of `OnePerPod`: poll `lock` every `lock.interval` seconds until `stop`;
    while held, await `run(stop)` (which returns once `stop` is set), then release."""
    _logs.defer_to_logging()
    _log.info("contending for the pod lock", lock=str(lock.path), pid=os.getpid())
    while not stop.is_set():
        if lock.try_acquire(note=note):
            try:
                if lock.after_release and await _set_within(stop, lock.settle):
                    break  # this process is stopping too
                _log.info(
                    "pod lock taken; starting the scheduler", lock=str(lock.path), pid=os.getpid()
                )
                await run(stop)
            finally:
                lock.release()
        await _set_within(stop, lock.interval)


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


def run_in_background(
    scheduler: Startable, *, pod_lock: PodLock | None = None
) -> Callable[[], None]:
    """What a WSGI integration does at startup: start `scheduler` in a background thread of
    this process (with `pod_lock`: whenever this worker holds it), stop it at the process's
    normal exit (`stop_at_exit`), and warn if this process forks while it runs. Returns
    the function that stops it (idempotent)."""
    if pod_lock is None:
        scheduler.start()
        stop: Callable[[], None] = scheduler.stop
    else:
        leader = OnePerPod(scheduler, pod_lock)
        leader.start()
        stop = leader.stop
    note_fork_hazard(scheduler)
    stop_at_exit(stop)
    return stop


def stop_at_exit(stop: Callable[[], None]) -> None:
    """Call `stop` when the interpreter exits normally (a WSGI worker's graceful exit), before
    Python joins the thread pools' threads, which a running handler would otherwise hold up
    for good (`concurrent.futures` waits for them before `atexit` runs). A process killed by a
    signal it does not handle runs nothing: its Leases expire instead."""
    import concurrent.futures.thread  # noqa: F401 - its exit hook must be registered first

    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython 3.9+: plain atexit, after the pools were joined
        atexit.register(stop)
        return
    register(stop)


def note_fork_hazard(scheduler: Startable) -> None:
    """Warn (once) if this process forks while `scheduler` runs: the child gets a copy of the
    Scheduler that does not run, under the parent's identity. A `gunicorn --preload` master
    forking its workers after the app started one is the usual cause."""
    _running.add(scheduler)


def _before_fork() -> None:
    for scheduler in list(_running):
        if scheduler.running:
            _running.discard(scheduler)  # once is enough
            _log.warning(
                "this process forks while its Scheduler runs: the Scheduler does not run in "
                "the child. If this is a server's master forking its workers, start the "
                "Scheduler in the workers instead (no gunicorn --preload)",
                holder=scheduler.identity,
                pid=os.getpid(),
            )


def _after_fork_in_child() -> None:
    for lock in list(_locks):
        lock._forget_after_fork()
    _running.clear()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
