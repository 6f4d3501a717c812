"""`LostEvent`: a threading.Event (set and waited on from any thread, awaited from a
coroutine) whose callbacks run once when it is set, and whose Condition is made only when a
thread waits on it (every run has one or two and almost none is waited on by a thread)."""

from __future__ import annotations

import asyncio
import threading
import time

from leasecron.coordination import LostEvent


def waiting(event: LostEvent, threads: int) -> None:
    """Until `threads` threads wait on `event`'s Condition (so that `set` has to wake them)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        cond = event._waiters_cond
        if cond is not None and len(cond._waiters) >= threads:  # type: ignore[attr-defined]
            return
        time.sleep(0.001)
    raise AssertionError(f"{threads} threads did not come to wait")


def test_it_is_a_threading_event_that_a_thread_waiting_on_it_wakes_from() -> None:
    event, woke = LostEvent(), []
    waiter = threading.Thread(target=lambda: woke.append(event.wait(5)))
    waiter.start()
    waiting(event, 1)
    event.set()
    waiter.join(5)

    assert isinstance(event, threading.Event)
    assert woke == [True] and event.is_set()


def test_wait_times_out_unset_returns_at_once_once_set_and_clear_unsets_it() -> None:
    event = LostEvent()
    before = event.wait(0.01)
    event.set()
    after = event.wait()
    event.clear()

    assert (before, after, event.is_set()) == (False, True, False)


def test_its_callbacks_run_once_and_a_late_one_at_once() -> None:
    event, calls = LostEvent(), []
    event.on_set(lambda: calls.append("first"))
    removed = event.on_set(lambda: calls.append("removed"))
    removed()
    event.set()
    event.set()
    event.on_set(lambda: calls.append("late"))

    assert calls == ["first", "late"]


def test_no_condition_is_made_until_a_thread_waits() -> None:
    event = LostEvent()
    event.on_set(lambda: None)
    event.set()
    unwaited = event._waiters_cond
    event.wait(0)

    assert unwaited is None and event._waiters_cond is not None


def test_it_is_awaited_from_a_coroutine_set_from_another_thread() -> None:
    async def scenario() -> tuple[bool, bool]:
        event = LostEvent()
        threading.Timer(0.05, event.set).start()
        woke = await event.wait_async(5)
        return woke, await LostEvent().wait_async(0.01)

    assert asyncio.run(scenario()) == (True, False)


def test_many_threads_waiting_all_wake() -> None:
    event, woke = LostEvent(), []
    threads = [threading.Thread(target=lambda: woke.append(event.wait(5))) for _ in range(8)]
    for thread in threads:
        thread.start()
    waiting(event, 8)
    event.set()
    for thread in threads:
        thread.join(5)

    assert woke == [True] * 8
