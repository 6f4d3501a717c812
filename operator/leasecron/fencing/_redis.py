"""The three patterns on Redis through redis-py, sync (`redis.Redis`) and asyncio
(`redis.asyncio.Redis`): each a server-side script, so the check and the write are one step
that no other client can come between. Both flavours send the same `ScriptCall`
(`_redis_scripts`); nothing here is more than the sending.

- `redis_claim_period`: the period's run record, set only if absent (optionally expiring);
- `redis_fenced_hset`: a hash keyed by a natural key, written only while the token it keeps
  is at most the run's;
- `redis_fenced_exec`: any other commands, run only while the named fence has seen no higher
  token (and the fence raised to the run's).

Does not promise: that a write survives a failover to a replica that had not received it
(Redis replication is asynchronous); the token check then sees the older value too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from leasecron.fencing._outcomes import Claim, Fenced
from leasecron.fencing._redis_scripts import (
    PREFIX,
    TOKEN_FIELD,
    Arg,
    ScriptCall,
    claim_call,
    exec_call,
    hset_call,
)
from leasecron.fencing._runs import RunLike

T = TypeVar("T", Claim, Fenced)


def redis_claim_period(
    client: Redis,
    *,
    run: RunLike,
    period: str | None = None,
    ttl: float | None = None,
    prefix: str = PREFIX,
) -> Claim:
    """Record the run's period under `<prefix>:runs:<namespace>/<job>/<period>` unless a
    run recorded it first: a falsy `Claim` then (counted). `ttl` (seconds) lets the record
    expire; None keeps it."""
    return _send(client, claim_call(run, period=period, ttl=ttl, prefix=prefix))


def redis_fenced_hset(
    client: Redis,
    key: str,
    mapping: Mapping[str, Arg],
    *,
    run: RunLike,
    token_field: str = TOKEN_FIELD,
) -> Fenced:
    """HSET `mapping` into the hash `key` unless its `token_field` holds a higher token than
    the run's: a falsy `Fenced` then (counted), and the hash is left as it was."""
    return _send(client, hset_call(key, mapping, run=run, token_field=token_field))


def redis_fenced_exec(
    client: Redis,
    commands: Sequence[Sequence[Arg]],
    *,
    fence: str,
    run: RunLike,
    prefix: str = PREFIX,
) -> Fenced:
    """Run `commands` (each like `("SET", key, value)`) in one script, after raising the
    fence `<prefix>:fences:<fence>` to the run's token, unless it has seen a higher one: a
    falsy `Fenced` then (counted), and no command runs."""
    return _send(client, exec_call(fence, commands, run=run, prefix=prefix))


async def redis_claim_period_async(
    client: AsyncRedis,
    *,
    run: RunLike,
    period: str | None = None,
    ttl: float | None = None,
    prefix: str = PREFIX,
) -> Claim:
    """`redis_claim_period` on a `redis.asyncio.Redis`."""
    return await _send_async(client, claim_call(run, period=period, ttl=ttl, prefix=prefix))


async def redis_fenced_hset_async(
    client: AsyncRedis,
    key: str,
    mapping: Mapping[str, Arg],
    *,
    run: RunLike,
    token_field: str = TOKEN_FIELD,
) -> Fenced:
    """`redis_fenced_hset` on a `redis.asyncio.Redis`."""
    return await _send_async(client, hset_call(key, mapping, run=run, token_field=token_field))


async def redis_fenced_exec_async(
    client: AsyncRedis,
    commands: Sequence[Sequence[Arg]],
    *,
    fence: str,
    run: RunLike,
    prefix: str = PREFIX,
) -> Fenced:
    """`redis_fenced_exec` on a `redis.asyncio.Redis`."""
    return await _send_async(client, exec_call(fence, commands, run=run, prefix=prefix))


def _send(client: Redis, call: ScriptCall[T]) -> T:
    reply: Any = client.register_script(call.script)(keys=call.keys, args=call.args)
    return call.outcome(reply)


async def _send_async(client: AsyncRedis, call: ScriptCall[T]) -> T:
    reply: Any = await client.register_script(call.script)(keys=call.keys, args=call.args)
    return call.outcome(reply)
