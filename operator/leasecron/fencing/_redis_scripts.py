"""The Redis side as plain values: the Lua scripts (check and write in one server-side step),
the keys and arguments of each call, and the reading of a script's reply into a `Claim` or
`Fenced`. The sync and asyncio helpers (`_redis`) only send what this module builds.

Keys: a period's run record is the string `<prefix>:runs:<namespace>/<job>/<period>`; a
fence the string `<prefix>:fences:<name>`; a fenced hash keeps its token in the field
`fence_token`. Tokens are compared as Lua numbers (exact up to 2**53; a Lease's
leaseTransitions stays far below).

Does not promise: atomicity of a `redis_fenced_exec` whose command fails half-way (Redis does
not roll a script back: the commands before the failing one stay written), or Redis Cluster
support for commands on keys in another hash slot than the fence (give them one hash tag).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from leasecron.fencing._outcomes import Check, Claim, Fenced, claim_outcome, write_outcome
from leasecron.fencing._runs import FencingError, RunLike, RunRef, run_ref

STORE = "redis"
TOKEN_FIELD = "fence_token"
PREFIX = "leasecron"

_KIND = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= '%s' then return {'wrongtype', kind} end
"""
_STORED = """
if stored then
  local n = tonumber(stored)
  if not n then return {'badtoken', stored} end
  if n > tonumber(%s) then return {'refused', stored} end
end
"""
CLAIM = (
    (_KIND % "string")
    + """
if kind == 'string' then return {'taken', redis.call('GET', KEYS[1])} end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return {'claimed', ARGV[1]}
"""
)


def _fenced_script(kind: str, stored: str, token: str, write: str) -> str:
    """A script that runs `write` only when KEYS[1] holds a `kind` (or nothing) and the token
    it keeps (the Lua expression `stored`) is at most the run's (`token`)."""
    return (_KIND % kind) + f"local stored = {stored}\n" + (_STORED % token) + write


FENCED_HSET = _fenced_script(
    "hash",
    "redis.call('HGET', KEYS[1], ARGV[1])",
    "ARGV[2]",
    """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], unpack(ARGV, 3))
return {'applied', ARGV[2]}
""",
)
FENCED_EXEC = _fenced_script(
    "string",
    "redis.call('GET', KEYS[1])",
    "ARGV[1]",
    """
redis.call('SET', KEYS[1], ARGV[1])
local i = 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return {'applied', ARGV[1]}
""",
)

T = TypeVar("T", Claim, Fenced)
Arg = str | bytes | int | float


@dataclass(frozen=True)
class ScriptCall(Generic[T]):
    """One script run: its source, `keys` and `args`, and how to read its reply."""

    script: str
    keys: list[str]
    args: list[Arg]
    outcome: Callable[[Any], T]


def claim_call(
    run: RunLike, *, period: str | None, ttl: float | None, prefix: str
) -> ScriptCall[Claim]:
    ref = run_ref(run, period=period)
    key = f"{prefix}:runs:{ref.namespace}/{ref.job}/{ref.period}"
    if ttl is not None and not ttl > 0:
        raise FencingError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
    value = "" if ref.token is None else str(ref.token)

    def outcome(reply: Any) -> Claim:
        status, stored = _reply(reply, key)
        return claim_outcome(
            STORE,
            ref,
            recorded=status == "claimed",
            existing=lambda: int(stored) if stored.isdigit() else None,
        )

    return ScriptCall(CLAIM, [key], [value, ttl_ms], outcome)


def hset_call(
    key: str, mapping: Mapping[str, Arg], *, run: RunLike, token_field: str
) -> ScriptCall[Fenced]:
    ref = run_ref(run)
    token = ref.fenced("redis_fenced_hset")
    if not mapping:
        raise FencingError(f"mapping must hold at least one field for {key!r}, got {{}}")
    if token_field in mapping:
        raise FencingError(
            f"{token_field!r} is the token field: the helper writes it, leave it out"
        )
    args: list[Arg] = [token_field, token]
    for field, value in mapping.items():
        args += [field, value]
    return ScriptCall(FENCED_HSET, [key], args, _fenced(ref, key, Check.UPSERT))


def exec_call(
    fence: str, commands: Sequence[Sequence[Arg]], *, run: RunLike, prefix: str
) -> ScriptCall[Fenced]:
    ref = run_ref(run)
    token = ref.fenced("redis_fenced_exec")
    if not fence:
        raise FencingError(f"fence must be a non-empty string, got {fence!r}")
    key = f"{prefix}:fences:{fence}"
    args: list[Arg] = [token]
    for command in commands:
        if isinstance(command, str | bytes) or not command:
            raise FencingError(
                f"each command must be a non-empty sequence such as ('SET', key, value), "
                f"got {command!r}"
            )
        args += [len(command), *command]
    return ScriptCall(FENCED_EXEC, [key], args, _fenced(ref, key, Check.FENCE))


def _fenced(ref: RunRef, key: str, check: Check) -> Callable[[Any], Fenced]:
    def outcome(reply: Any) -> Fenced:
        status, stored = _reply(reply, key)
        if status == "badtoken":
            raise FencingError(f"the token stored at {key!r} is not an integer: {stored!r}")
        return write_outcome(
            STORE, ref, check, written=status == "applied", stored=lambda: int(stored)
        )

    return outcome


def _reply(reply: Any, key: str) -> tuple[str, str]:
    status, value = (_text(part) for part in reply)
    if status == "wrongtype":
        raise FencingError(f"Redis key {key!r} holds a {value}, not what this helper writes")
    return status, value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
