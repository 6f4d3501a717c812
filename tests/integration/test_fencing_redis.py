"""leasecron.fencing on a real redis-server (the session's, flushed per test), sync and
asyncio: check and write are one script, a refusal is a value and a counted metric, and a key
holding another type is named."""

from __future__ import annotations

import asyncio

import pytest
from fencing_helpers import Run, refused_claims, refused_writes

from leasecron.fencing import (
    FencingError,
    redis_claim_period,
    redis_claim_period_async,
    redis_fenced_exec,
    redis_fenced_exec_async,
    redis_fenced_hset,
    redis_fenced_hset_async,
)
from leasecron.testing._stores import RedisDatabase

KEY = "invoice:acme:2026-03"


def test_a_second_claim_of_a_period_is_refused_and_counted(redis_database: RedisDatabase) -> None:
    before = refused_claims("redis")
    with redis_database.client() as r:
        first = redis_claim_period(r, run=Run(token=3), ttl=60)
        second = redis_claim_period(r, run=Run(token=4))
        assert 0 < r.pttl("leasecron:runs:billing/invoices/2026-03-01T02:00:00Z") <= 60_000
    assert first and not second and second.token == 3
    assert refused_claims("redis") == before + 1


def test_the_successors_hash_stays_and_the_stale_write_is_refused_and_counted(
    redis_database: RedisDatabase,
) -> None:
    before = refused_writes("redis", "upsert")
    with redis_database.client(decode_responses=True) as r:
        assert redis_fenced_hset(r, KEY, {"total": 10}, run=Run(token=5))
        stale = redis_fenced_hset(r, KEY, {"total": 99}, run=Run(token=4))
        assert redis_fenced_hset(r, KEY, {"total": 11}, run=Run(token=5))
        assert r.hgetall(KEY) == {"total": "11", "fence_token": "5"}
    assert not stale and stale.stored_token == 5
    assert refused_writes("redis", "upsert") == before + 1


def test_a_stale_fenced_exec_runs_none_of_its_commands(redis_database: RedisDatabase) -> None:
    before = refused_writes("redis", "fence")
    with redis_database.client(decode_responses=True) as r:
        assert redis_fenced_exec(
            r,
            [("SET", "ledger:total", "10"), ("RPUSH", "ledger:log", "a")],
            fence="ledger",
            run=Run(token=6),
        )
        stale = redis_fenced_exec(
            r,
            [("SET", "ledger:total", "99"), ("RPUSH", "ledger:log", "b")],
            fence="ledger",
            run=Run(token=5),
        )
        assert r.get("ledger:total") == "10" and r.lrange("ledger:log", 0, -1) == ["a"]
        assert r.get("leasecron:fences:ledger") == "6"
    assert not stale and stale.stored_token == 6
    assert refused_writes("redis", "fence") == before + 1


def test_the_asyncio_helpers_refuse_the_same_stale_writes(redis_database: RedisDatabase) -> None:
    async def scenario() -> list[bool]:
        async with redis_database.async_client() as r:
            return [
                bool(await redis_claim_period_async(r, run=Run(token=1))),
                bool(await redis_claim_period_async(r, run=Run(token=2))),
                bool(await redis_fenced_hset_async(r, KEY, {"total": 1}, run=Run(token=5))),
                bool(await redis_fenced_hset_async(r, KEY, {"total": 2}, run=Run(token=4))),
                bool(
                    await redis_fenced_exec_async(r, [("SET", "x", 1)], fence="f", run=Run(token=5))
                ),
                bool(
                    await redis_fenced_exec_async(r, [("SET", "x", 2)], fence="f", run=Run(token=4))
                ),
            ]

    assert asyncio.run(scenario()) == [True, False, True, False, True, False]


def test_a_key_holding_another_type_is_named(redis_database: RedisDatabase) -> None:
    with redis_database.client() as r:
        r.rpush(KEY, "x")
        r.set("leasecron:fences:ledger", "not a token")
        with pytest.raises(FencingError, match=f"Redis key '{KEY}' holds a list"):
            redis_fenced_hset(r, KEY, {"total": 1}, run=Run(token=1))
        with pytest.raises(FencingError, match="is not an integer: 'not a token'"):
            redis_fenced_exec(r, [("SET", "x", 1)], fence="ledger", run=Run(token=1))
        r.hset("leasecron:runs:billing/invoices/2026-03-01T02:00:00Z", "a", "b")
        with pytest.raises(FencingError, match="holds a hash"):
            redis_claim_period(r, run=Run(token=1))
