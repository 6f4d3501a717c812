"""`StartPacer`: run starts go through a slice of event-loop time at a time, so that what
waits on the loop behind thousands of starts (a grant's renewal) runs between slices."""

from __future__ import annotations

import asyncio
import time

import pytest

from leasecron.runtime._pacing import StartPacer


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _starts_and_a_timer(pacer: StartPacer | None, *, starts: int) -> tuple[int, int]:
    """`starts` tasks each holding the loop 1 ms once let through, and a callback due as
    they begin: how many starts had run when it ran, and how many in all."""
    started = 0
    seen_at: list[int] = []

    async def start() -> None:
        nonlocal started
        if pacer is not None:
            await pacer.turn()
        _busy(0.001)
        started += 1

    loop = asyncio.get_running_loop()
    loop.call_later(0.0, lambda: seen_at.append(started))
    await asyncio.gather(*(start() for _ in range(starts)))
    return seen_at[0], started


def test_a_timer_due_during_a_burst_of_paced_starts_runs_long_before_the_last_start() -> None:
    seen, total = asyncio.run(_starts_and_a_timer(StartPacer(slice_s=0.01), starts=300))
    assert total == 300
    assert seen < 100


def test_without_pacing_the_same_timer_waits_for_every_start() -> None:
    seen, total = asyncio.run(_starts_and_a_timer(None, starts=300))
    assert (seen, total) == (300, 300)


def test_paced_starts_keep_their_arrival_order() -> None:
    async def main() -> list[int]:
        pacer, order = StartPacer(slice_s=0.005), []

        async def start(index: int) -> None:
            await pacer.turn()
            _busy(0.001)
            order.append(index)

        await asyncio.gather(*(start(i) for i in range(50)))
        return order

    assert asyncio.run(main()) == list(range(50))


def test_a_start_cancelled_while_queued_does_not_stop_the_others() -> None:
    async def main() -> int:
        pacer, done = StartPacer(slice_s=0.001), 0

        async def start() -> None:
            nonlocal done
            await pacer.turn()
            _busy(0.002)
            done += 1

        tasks = [asyncio.ensure_future(start()) for _ in range(20)]
        await asyncio.sleep(0)
        tasks[10].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return done

    assert asyncio.run(main()) == 19


def test_idle_returns_once_the_queued_starts_are_through_or_at_its_timeout() -> None:
    async def scenario() -> tuple[int, int, bool, float]:
        pacer = StartPacer(slice_s=0.001)

        async def start() -> None:
            await pacer.turn()
            _busy(0.002)  # longer than a slice: the others queue

        tasks = [asyncio.ensure_future(start()) for _ in range(20)]
        await asyncio.sleep(0)
        queued = pacer.waiting
        await pacer.idle(timeout=10)
        at_idle = pacer.waiting
        await asyncio.gather(*tasks)
        await pacer.idle(timeout=10)  # nothing waits: at once
        # A start that never gets its turn (the loop is held): idle gives up at its timeout.
        blocked = StartPacer(slice_s=0.001)
        blocked._waiting.append(asyncio.get_running_loop().create_future())
        loop = asyncio.get_running_loop()
        began = loop.time()
        await blocked.idle(timeout=0.05)
        return queued, at_idle, pacer.waiting == 0, loop.time() - began

    queued, at_idle, drained, gave_up_after = asyncio.run(scenario())
    assert queued > 0 and at_idle == 0 and drained
    assert 0.05 <= gave_up_after < 1


def test_a_slice_must_be_positive() -> None:
    with pytest.raises(ValueError, match="slice_s"):
        StartPacer(slice_s=0)


def test_idle_waits_for_the_claims_in_flight_as_for_queued_starts() -> None:
    """The records of an instant's first runs go after its claims: `idle` returns once every
    claim registered with `claiming` is settled (or at its timeout)."""

    async def scenario() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        pacer = StartPacer()
        first, second = loop.create_future(), loop.create_future()
        pacer.claiming(first)
        pacer.claiming(second)
        waiter = asyncio.ensure_future(pacer.idle(timeout=10))
        for _ in range(5):  # the waiter has run up to its wait (and would have returned)
            await asyncio.sleep(0)
        while_claiming = waiter.done()
        first.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)
        one_left = waiter.done()
        second.cancel()  # a claim given up counts as settled too
        await asyncio.wait_for(waiter, 1)
        return while_claiming, one_left, waiter.done()

    while_claiming, one_left, after = asyncio.run(scenario())
    assert not while_claiming and not one_left and after


def test_a_claim_holds_idle_up_at_most_its_hold_time() -> None:
    """A claim that waits out another replica's live grant (minutes, for a hung run) must not
    hold up the records that long."""

    async def scenario() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        pacer = StartPacer()
        never = loop.create_future()
        pacer.claiming(never, at_most=0.05)
        began = loop.time()
        await pacer.idle(timeout=10)
        waited = loop.time() - began
        never.set_result(None)  # settled later: counted once
        await asyncio.sleep(0)
        return waited, pacer._claims

    waited, claims = asyncio.run(scenario())
    assert 0.05 <= waited < 1 and claims == 0


def test_on_busy_is_told_when_a_burst_of_claims_and_starts_begins_and_when_it_is_through() -> None:
    """From the first claim in flight (or start queued) until none is left: once each way."""

    async def scenario() -> list[bool]:
        loop = asyncio.get_running_loop()
        pacer, told = StartPacer(slice_s=0.001), []
        pacer.on_busy = told.append
        claim = loop.create_future()
        pacer.claiming(claim)
        claim.set_result(None)
        await asyncio.sleep(0)
        starts = 0

        async def start() -> None:
            nonlocal starts
            await pacer.turn()
            sum(range(20_000))  # a start's work: later ones no longer fit the slice
            starts += 1

        await asyncio.gather(*(start() for _ in range(200)))
        await pacer.idle(timeout=1)
        assert starts == 200
        return told

    assert asyncio.run(scenario()) == [True, False, True, False]


def test_a_claim_settled_while_a_slice_is_closing_leaves_the_burst_to_the_close() -> None:
    """A slice closing has woken starts that have not taken their step yet: a claim settled
    then does not end the burst (records and collection would go before those starts);
    the close tells it once they have."""

    async def scenario() -> tuple[list[bool], list[bool]]:
        loop = asyncio.get_running_loop()
        pacer, told = StartPacer(), []
        pacer.on_busy = told.append
        claim = loop.create_future()
        pacer.claiming(claim)
        pacer._closing = True  # the state between waking a batch and its starts' step
        claim.set_result(None)
        await asyncio.sleep(0)  # the claim's release runs
        during = list(told)
        pacer._closing = False
        pacer._tell_idle()  # what the close does after the starts' step
        return during, told

    during, after = asyncio.run(scenario())
    assert during == [True] and after == [True, False]
