"""JobContext: idempotency keys, lost, assert_held."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leasecron import LostLockError
from leasecron.models.specs import Bucket
from leasecron.runtime._context import JobContext

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def make(**overrides: object) -> JobContext:
    values: dict[str, object] = {
        "job": "nightly-report",
        "namespace": "billing",
        "tick": TICK,
        "holder": "pod-a-12345678",
        "bucket": Bucket.ONCE_PER_TICK,
        "token": 7,
    }
    values.update(overrides)
    return JobContext(**values)  # type: ignore[arg-type]


def test_the_idempotency_key_of_a_tick_names_namespace_job_and_tick() -> None:
    assert make().idempotency_key == "billing/nightly-report/2026-03-01T02:00:00Z"


def test_the_idempotency_key_of_a_single_owner_term_names_its_token() -> None:
    assert make(bucket=Bucket.SINGLE_OWNER).idempotency_key == "billing/nightly-report/term-7"


def test_assert_held_passes_while_the_grant_is_held_and_raises_once_lost() -> None:
    ctx = make(held=lambda: True)
    ctx.assert_held()
    before = ctx.cancelled
    ctx.lost.set()
    assert (before, ctx.cancelled) == (False, True)
    with pytest.raises(LostLockError, match="token 7"):
        ctx.assert_held()


def test_assert_held_raises_and_sets_lost_when_the_runtime_says_the_grant_is_gone() -> None:
    ctx = make(held=lambda: False)
    with pytest.raises(LostLockError, match="no longer held"):
        ctx.assert_held()
    assert ctx.lost.is_set()


def test_wait_lost_returns_false_after_the_timeout_and_true_once_lost() -> None:
    ctx = make()
    assert ctx.wait_lost(0) is False
    ctx.lost.set()
    assert ctx.wait_lost(0) is True
