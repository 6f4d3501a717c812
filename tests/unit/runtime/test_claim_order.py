"""The order of an instant's claims on one replica (docs/design.md §5.3 step 2): the claims
it is placed to make are launched first, and a claim another member is placed to make counts
the time it waited before its work as part of its stagger."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from leasecron.models.clocks import FakeClock
from leasecron.models.shards import ShardRef
from leasecron.runtime import _shard_claims
from leasecron.runtime._shard_timer import ShardTimer, _Prepared

T = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)


def _ref(index: int) -> ShardRef:
    return ShardRef(lease=f"leasecron-shard-g-4-{index}", shard=index, shards=4)


def test_the_claims_this_replica_is_placed_to_make_are_launched_first() -> None:
    spawned: list[str] = []

    def spawn(coroutine: Coroutine[Any, Any, None], name: str) -> None:
        coroutine.close()
        spawned.append(name.split()[2])

    async def instant(ref: ShardRef, at: datetime, catch_up: dict[str, bool]) -> None:
        return None

    claims = SimpleNamespace(place_first=lambda *a, **k: None, instant=instant)
    services = SimpleNamespace(identity="me")
    timer = ShardTimer(
        cast(Any, services),
        cast(Any, None),
        cast(Any, None),
        cast(Any, claims),
        cast(Any, None),
        spawn=spawn,
    )
    placed = {0: "other", 1: "me", 2: "other", 3: "me"}
    prepared = _Prepared(
        due=[],
        groups={(_ref(i), T): {f"job-{i}": False} for i in range(4)},
        first={(_ref(i).lease, T): (member, 4) for i, member in placed.items()},
    )
    timer._launch(prepared)
    assert spawned == [_ref(1).lease, _ref(3).lease, _ref(0).lease, _ref(2).lease]


def test_a_claims_stagger_counts_the_time_it_waited_before_its_work() -> None:
    tried: list[float] = []

    async def try_claim(tick: datetime, *, stagger: float, **_: Any) -> None:
        tried.append(stagger)

    lock = SimpleNamespace(
        holding=lambda: False,
        claims=SimpleNamespace(clock=FakeClock(start=T)),
        try_claim=try_claim,
    )

    async def attempts() -> None:
        for waited in (0.0, 0.05, 0.5):
            await _shard_claims._attempt(
                cast(Any, lock),
                T,
                T,
                rank=2,
                step=0.1,
                claim_deadline=None,
                above=0,
                waited=waited,
            )

    asyncio.run(attempts())
    assert [round(s, 6) for s in tried] == [0.2, 0.15, 0.0]
