"""One Scheduler per pod under several workers: the pod lock (an advisory flock) and the
thread that runs a scheduler while its process holds it. Real locks on a temporary file and
real processes (the lock is the kernel's); the scheduler is a stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from leasecron.integrations.workers import (
    OnePerPod,
    PodLock,
    lead_when_locked,
    note_fork_hazard,
)
from leasecron.testing import poll

HOLD = textwrap.dedent(
    """
    import sys, time
    from leasecron.integrations.workers import PodLock
    lock = PodLock(sys.argv[1])
    print("held" if lock.try_acquire(note="child-1") else "busy", flush=True)
    time.sleep(600)
    """
)


class FakeScheduler:
    """What OnePerPod needs of a Scheduler; `started` is set on each start."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.running = False
        self.starts = 0
        self.started = threading.Event()
        self.stopped = threading.Event()

    def start(self, *, timeout: float = 60.0) -> None:
        self.running, self.starts = True, self.starts + 1
        self.started.set()

    def stop(self, *, timeout: float | None = None) -> None:
        self.running = False
        self.stopped.set()


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "locks" / "leasecron-ns-web.lock"


@contextlib.contextmanager
def holding_child(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding the lock at `path` (killed and reaped after)."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "held"
            yield child
        finally:
            child.kill()


def test_only_one_holder_at_a_time_and_the_holder_writes_its_pid_and_identity(
    lock_path: Path,
) -> None:
    first, second = PodLock(lock_path), PodLock(lock_path)
    assert first.try_acquire(note="pod-a-1")
    assert not second.try_acquire(note="pod-a-2")
    assert lock_path.read_text() == f"{os.getpid()} pod-a-1\n" and not first.after_release
    first.release()
    assert lock_path.read_text() == "released\n"
    assert second.try_acquire(note="pod-a-2") and second.held and not first.held
    assert second.after_release  # its predecessor let go rather than died
    second.release()


def test_a_holder_killed_with_sigkill_loses_the_lock_at_once(lock_path: Path) -> None:
    mine = PodLock(lock_path)
    with holding_child(lock_path) as child:
        assert not mine.try_acquire()
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert mine.try_acquire()  # the kernel dropped the dead process's lock
        assert not mine.after_release  # and nothing to wait for: run at once
    mine.release()


def test_a_forked_child_neither_holds_nor_releases_its_parents_lock(lock_path: Path) -> None:
    lock = PodLock(lock_path)
    assert lock.try_acquire()
    pid = os.fork()
    if pid == 0:  # the child: the fork hook dropped the descriptor it inherited
        code = 0 if not lock.held and not PodLock(lock_path).try_acquire() else 1
        lock.release()  # nothing to release here
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert lock.held
    assert not PodLock(lock_path).try_acquire()  # still ours after the child exited
    lock.release()


def test_the_lock_of_a_scheduler_is_named_after_its_namespace_and_group(tmp_path: Path) -> None:
    class Named:
        namespace, group = "billing", "api/v2"

    lock = PodLock.for_scheduler(Named(), directory=tmp_path)
    assert lock.path == tmp_path / "leasecron-billing-api-v2.lock"
    with pytest.raises(ValueError, match="interval"):
        PodLock(tmp_path / "x.lock", interval=0)
    with pytest.raises(ValueError, match="settle"):
        PodLock(tmp_path / "x.lock", settle=-1)


def test_the_worker_holding_the_lock_runs_the_scheduler_and_another_takes_over_after_it_stops(
    lock_path: Path,
) -> None:
    a, b = FakeScheduler("pod-a-1"), FakeScheduler("pod-a-2")
    first = OnePerPod(a, PodLock(lock_path, interval=0.01, settle=0.01))
    second = OnePerPod(b, PodLock(lock_path, interval=0.01, settle=0.01))
    first.start()
    try:
        assert a.started.wait(10) and first.leading
        second.start()
        assert not b.started.wait(0.2)  # contending, not running
        first.stop(timeout=10)
        assert a.stopped.is_set() and not a.running and not first.leading
        assert b.started.wait(10) and second.leading
        assert lock_path.read_text().split()[1] == "pod-a-2"
    finally:
        first.stop(timeout=10)
        second.stop(timeout=10)
    assert not b.running and not second.leading


def test_a_worker_that_stops_while_settling_after_a_release_never_starts_a_scheduler(
    lock_path: Path,
) -> None:
    # At pod shutdown every worker exits at once: the one that takes the released lock is
    # usually exiting too, and must not start a Scheduler for a moment.
    released = PodLock(lock_path)
    assert released.try_acquire(note="pod-a-1")
    released.release()
    scheduler = FakeScheduler("pod-a-2")
    worker = OnePerPod(scheduler, PodLock(lock_path, interval=0.01, settle=30))
    worker.start()
    poll(lambda: worker.leading, timeout=10, what="the lock taken")
    worker.stop(timeout=10)
    assert scheduler.starts == 0 and not worker.leading


def test_a_worker_takes_over_from_a_holder_process_that_was_killed(lock_path: Path) -> None:
    scheduler = FakeScheduler("pod-a-2")
    worker = OnePerPod(scheduler, PodLock(lock_path, interval=0.01))
    with holding_child(lock_path) as child:
        worker.start()
        try:
            assert not scheduler.started.wait(0.2)
            child.send_signal(signal.SIGKILL)
            child.wait()
            assert scheduler.started.wait(10)
        finally:
            worker.stop(timeout=10)


def test_a_scheduler_that_ended_on_its_own_is_started_again(lock_path: Path) -> None:
    scheduler = FakeScheduler("pod-a-1")
    worker = OnePerPod(scheduler, PodLock(lock_path, interval=0.01))
    worker.start()
    try:
        assert scheduler.started.wait(10)
        scheduler.started.clear()
        scheduler.running = False  # its thread died
        assert scheduler.started.wait(10) and scheduler.starts == 2
    finally:
        worker.stop(timeout=10)


EXIT_WITH_A_BUSY_HANDLER = textwrap.dedent(
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from leasecron.integrations.workers import stop_at_exit

    stopped = threading.Event()
    pool = ThreadPoolExecutor(1)
    pool.submit(stopped.wait)   # a single-owner handler: runs until told to stop
    stop_at_exit(stopped.set)
    print("exiting", flush=True)
    """
)


def test_a_stop_registered_for_exit_runs_before_python_waits_for_the_handler_threads() -> None:
    # With plain atexit the interpreter would wait for the handler thread first, for good.
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_A_BUSY_HANDLER],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exiting\n"


def test_forking_while_a_scheduler_runs_is_warned_about_once() -> None:
    scheduler = FakeScheduler("pod-a-1")
    scheduler.start()
    note_fork_hazard(scheduler)
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
    warnings = [log for log in logs if "forks while its Scheduler runs" in log["event"]]
    assert [log["holder"] for log in warnings] == ["pod-a-1"]


def test_the_asyncio_form_runs_while_holding_the_lock_and_settles_after_a_release(
    lock_path: Path,
) -> None:
    runs: list[str] = []

    class Lock(PodLock):
        """Says when it was taken."""

        taken: asyncio.Event

        def try_acquire(self, *, note: str = "") -> bool:
            held = super().try_acquire(note=note)
            if held:
                self.taken.set()
            return held

    async def run(stop: asyncio.Event) -> None:
        runs.append("started")
        await stop.wait()

    async def lead(lock: Lock) -> None:
        lock.taken, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(lead_when_locked(lock, note="pod-a-1", run=run, stop=stop))
        await asyncio.wait_for(lock.taken.wait(), 10)
        await asyncio.sleep(0)  # let it start what it starts at once
        stop.set()
        await task

    asyncio.run(lead(Lock(lock_path, interval=0.01)))
    assert runs == ["started"] and lock_path.read_text() == "released\n"
    settling = Lock(lock_path, interval=0.01, settle=30)
    asyncio.run(lead(settling))
    assert runs == ["started"] and not settling.held  # stopped while settling: never ran
