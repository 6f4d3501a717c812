"""The Redis scripts' calls as values: keys and arguments built from the run, replies read
into outcomes (a refusal counted), and a key of another type named."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from leasecron.fencing import FencingError
from leasecron.fencing._redis_scripts import claim_call, exec_call, hset_call


@dataclass(frozen=True)
class Run:
    token: int | None = 7
    namespace: str = "billing"
    job: str = "unit-redis"
    tick: datetime = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def refused(check: str) -> float:
    labels = {"store": "redis", "job_namespace": "billing", "scheduled_job": "unit-redis"}
    value = REGISTRY.get_sample_value(
        "leasecron_fenced_writes_refused_total", {**labels, "check": check}
    )
    return value or 0.0


def test_a_claim_is_keyed_by_namespace_job_and_period_and_may_expire() -> None:
    call = claim_call(Run(), period=None, ttl=1.5, prefix="app")
    assert call.keys == ["app:runs:billing/unit-redis/2026-03-01T02:00:00Z"]
    assert call.args == ["7", 1500]
    assert call.outcome([b"claimed", b"7"])
    taken = call.outcome([b"taken", b"3"])
    assert not taken and taken.token == 3


def test_a_claim_without_a_token_stores_an_empty_value() -> None:
    call = claim_call(Run(token=None), period="2026-03", ttl=None, prefix="leasecron")
    assert call.args == ["", 0]
    assert call.outcome([b"taken", b""]).token is None


def test_a_fenced_hset_sends_the_token_first_and_counts_a_refusal() -> None:
    call = hset_call("invoice:1", {"total": 10, "currency": "EUR"}, run=Run(), token_field="tok")
    assert call.args == ["tok", 7, "total", 10, "currency", "EUR"]
    before = refused("upsert")
    outcome = call.outcome([b"refused", b"9"])
    assert not outcome and outcome.stored_token == 9
    assert refused("upsert") == before + 1
    assert call.outcome([b"applied", b"7"])


def test_a_fenced_exec_sends_each_command_with_its_length() -> None:
    call = exec_call("ledger", [("SET", "a", 1), ("DEL", "b")], run=Run(), prefix="leasecron")
    assert call.keys == ["leasecron:fences:ledger"]
    assert call.args == [7, 3, "SET", "a", 1, 2, "DEL", "b"]


def test_a_key_of_another_type_and_a_stored_token_that_is_not_a_number_are_named() -> None:
    call = hset_call("invoice:1", {"total": 1}, run=Run(), token_field="fence_token")
    with pytest.raises(FencingError, match="Redis key 'invoice:1' holds a list"):
        call.outcome([b"wrongtype", b"list"])
    with pytest.raises(FencingError, match="stored at 'invoice:1' is not an integer: 'x'"):
        call.outcome([b"badtoken", b"x"])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: hset_call("k", {}, run=Run(), token_field="t"), "mapping must hold"),
        (lambda: hset_call("k", {"t": 1}, run=Run(), token_field="t"), "'t' is the token field"),
        (lambda: exec_call("f", ["SET"], run=Run(), prefix="p"), "each command must be"),
        (lambda: exec_call("f", [], run=Run(token=None), prefix="p"), "has no fencing token"),
        (lambda: claim_call(Run(), period=None, ttl=0, prefix="p"), "ttl must be a positive"),
    ],
)
def test_bad_input_is_named_before_anything_is_sent(build: object, message: str) -> None:
    with pytest.raises(FencingError, match=message):
        build()  # type: ignore[operator]
