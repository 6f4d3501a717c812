"""The Scheduler's garbage-collector freezing (`runtime._collector.GcTuner`): the heap is
frozen when the jobs held have grown by a quarter (and by 100) since the last freeze, and
never when it is turned off; collection is held through a burst of claims and starts."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from leasecron.runtime import _collector
from leasecron.runtime._collector import DEFAULT_THRESHOLDS, THRESHOLDS, GcTuner


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(*DEFAULT_THRESHOLDS)
    yield
    gc.enable()
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_the_heap_is_frozen_as_the_jobs_grow_by_a_quarter_and_at_least_a_hundred() -> None:
    freezer = GcTuner(enabled=True)

    froze = [count for count in range(1, 2001) if freezer.jobs(count)]

    assert froze == [100, 200, 300, 400, 500, 625, 781, 976, 1220, 1525, 1906]
    assert gc.get_freeze_count() > 0


def test_objects_made_before_a_freeze_are_out_of_the_collections() -> None:
    freezer = GcTuner(enabled=True)
    kept = [[index] for index in range(1000)]

    assert freezer.jobs(100)
    assert gc.get_freeze_count() >= len(kept)


def test_turned_off_it_never_freezes() -> None:
    freezer = GcTuner(enabled=False)

    assert not any(freezer.jobs(count) for count in range(1, 5000))
    assert gc.get_freeze_count() == 0


def test_the_thresholds_are_raised_while_it_runs_and_put_back_after() -> None:
    tuner = GcTuner(enabled=True)

    tuner.start()
    during = gc.get_threshold()
    tuner.stop()

    assert (during, gc.get_threshold()) == (THRESHOLDS, DEFAULT_THRESHOLDS)


def test_thresholds_the_application_set_are_left_as_they_are() -> None:
    gc.set_threshold(1000, 20, 20)
    tuner = GcTuner(enabled=True)

    tuner.start()
    during = gc.get_threshold()
    tuner.stop()

    assert during == gc.get_threshold() == (1000, 20, 20)


def test_turned_off_the_thresholds_stay() -> None:
    tuner = GcTuner(enabled=False)

    tuner.start()

    assert gc.get_threshold() == DEFAULT_THRESHOLDS


def test_collection_is_held_through_a_burst_and_let_go_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_collector, "SETTLE_S", 0.1)

    async def scenario() -> list[bool]:
        tuner, seen = GcTuner(enabled=True), []
        tuner.hold(True)
        seen.append(gc.isenabled())
        tuner.hold(False)
        await asyncio.sleep(_collector.SETTLE_S / 2)
        seen.append(gc.isenabled())  # settling: another burst may follow
        tuner.hold(True)
        tuner.hold(False)
        await asyncio.sleep(_collector.SETTLE_S * 0.75)
        seen.append(gc.isenabled())  # the settling began again with the last burst
        await asyncio.sleep(_collector.SETTLE_S)
        seen.append(gc.isenabled())
        return seen

    assert asyncio.run(scenario()) == [False, False, False, True]


def test_a_burst_holds_collection_at_most_its_hold_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_collector, "HOLD_MAX_S", 0.01)

    async def scenario() -> bool:
        GcTuner(enabled=True).hold(True)
        await asyncio.sleep(0.05)
        return gc.isenabled()

    assert asyncio.run(scenario())


def test_a_collector_the_application_disabled_stays_disabled_and_off_means_off() -> None:
    async def scenario() -> list[bool]:
        seen = []
        gc.disable()
        try:
            tuner = GcTuner(enabled=True)
            tuner.hold(True)
            tuner.hold(False)
            await asyncio.sleep(_collector.SETTLE_S * 1.5)
            seen.append(gc.isenabled())
        finally:
            gc.enable()
        off = GcTuner(enabled=False)
        off.hold(True)
        seen.append(gc.isenabled())
        off.hold(False)
        off.stop()
        return seen

    assert asyncio.run(scenario()) == [False, True]


def test_stopping_lets_a_held_collection_go() -> None:
    async def scenario() -> bool:
        tuner = GcTuner(enabled=True)
        tuner.start()
        tuner.hold(True)
        tuner.hold(False)
        tuner.stop()
        return gc.isenabled()

    assert asyncio.run(scenario())
