"""What a guard hands back: a skipped tick is a falsy value with its reason, a held run is
truthy with its token; `current_run()` only exists inside a guarded body."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leasecron.coordination import Grant, LostLockError, ReleaseResult
from leasecron.models.clocks import FakeClock
from leasecron.runtime import GuardResult, GuardRun, current_run
from leasecron.runtime._guard_runs import enter, leave

TICK = datetime(2026, 1, 1, tzinfo=UTC)


class NoOwner:
    async def renew(self, grant: Grant) -> bool:
        return False

    async def release(self, grant: Grant) -> ReleaseResult:
        return ReleaseResult.FREED

    def keep_alive(self, grant: Grant, *, listeners: object = ()) -> object:
        raise NotImplementedError


def held_run(clock: FakeClock) -> GuardRun:
    grant = Grant(
        owner=NoOwner(),  # type: ignore[arg-type]
        namespace="ns",
        name="leasecron-guard-g",
        token=7,
        tick=TICK,
        holder="replica-1",
        acquired_at=clock.monotonic(),
        expires_at=clock.monotonic() + 10,
        clock=clock,
    )
    return GuardRun(guard="g", namespace="ns", tick=TICK, grant=grant)


def test_a_skipped_tick_is_falsy_with_its_reason_and_the_holder_that_has_it() -> None:
    run = GuardRun(guard="g", namespace="ns", tick=TICK, reason="taken", holder="replica-2")
    result: GuardResult[int] = GuardResult.of(run)
    assert not run and not result
    assert (result.ran, result.reason, result.token, result.holder) == (
        False,
        "taken",
        None,
        "replica-2",
    )
    assert result.value is None and result.tick == TICK
    assert run.lost.is_set() and not run.held


def test_assert_held_on_a_skipped_tick_raises_with_the_reason() -> None:
    run = GuardRun(guard="g", namespace="ns", tick=TICK, reason="deadline")
    with pytest.raises(LostLockError, match=r"not claimed \(deadline\)"):
        run.assert_held()


def test_a_held_run_is_truthy_with_its_token_until_its_local_deadline_passes() -> None:
    clock = FakeClock()
    run = held_run(clock)
    result = GuardResult.of(run, 42)
    assert run and result and bool(result) is result.ran is True
    assert (result.value, result.reason, result.token, result.holder) == (42, "", 7, "replica-1")
    run.assert_held()
    clock.advance(10)
    assert not run.held and run.lost.is_set()
    with pytest.raises(LostLockError, match="token 7"):
        run.assert_held()


def test_a_result_whose_body_returned_a_falsy_value_is_still_truthy() -> None:
    assert GuardResult.of(held_run(FakeClock()), 0)


def test_current_run_is_the_run_inside_a_body_and_an_error_outside() -> None:
    run = held_run(FakeClock())
    token = enter(run)
    try:
        assert current_run() is run
    finally:
        leave(token)
    with pytest.raises(RuntimeError, match="only available inside a guarded body"):
        current_run()
