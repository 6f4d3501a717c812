"""Tick high-water marks under an election term: what the group leader records on its Lease
before it runs a `coordination: Leader` job's tick, so that no later leader (whose clock may
run behind) runs that tick again (docs/design.md §5.4).

`mark_tick` writes the mark of one job (annotation `leasecron.dev/ticks`, JSON job -> tick)
with a conditional update of the leader Lease that still shows the elector's current term; a
conflict is read back and retried, a lost reply is read back. It does not run anything and does
not promise the write: `Mark` says what happened.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import datetime
from enum import StrEnum

from leasecron.coordination._views import Seen
from leasecron.coordination.elections import Elector
from leasecron.kube.errors import KubeError
from leasecron.models.decisions import lost_reason
from leasecron.models.leases import tick_marks, with_tick_marks

_ATTEMPTS = 3


class Mark(StrEnum):
    """What `mark_tick` found."""

    MARKED = "marked"
    TAKEN = "taken"  # the job's mark is at or past the tick: it ran already
    NOT_LEADER = "not_leader"
    UNAVAILABLE = "store_unavailable"


async def mark_tick(elector: Elector, job: str, tick: datetime, *, keep: Collection[str]) -> Mark:
    """Record `tick` as `job`'s mark on `elector`'s Lease, conditional on the Lease showing
    its current term; `TAKEN` when the mark is already at or past `tick`. Marks of jobs not
    in `keep` are dropped in the same write."""
    term = elector.term
    for _ in range(_ATTEMPTS):
        if term is None or not term.held:
            return Mark.NOT_LEADER
        seen = elector.lease.observe()
        record = seen.observation.record if seen is not None else None
        if seen is None or record is None:
            return Mark.NOT_LEADER
        if lost_reason(record, identity=term.holder, token=term.token) is not None:
            return Mark.NOT_LEADER
        marks = tick_marks(seen.obj)
        if job in marks and marks[job] >= tick:
            return Mark.TAKEN
        kept = {name: at for name, at in marks.items() if name in keep}
        base = Seen(with_tick_marks(seen.obj, {**kept, job: tick}), seen.observation)
        try:
            await elector.lease.update(replace(record, problems=()), base=base)
            return Mark.MARKED
        except (KubeError, TimeoutError):
            pass  # a conflict, or a reply that may be lost: read back below
        if not await elector.lease.refresh():
            return Mark.UNAVAILABLE
        seen = elector.lease.observe()
        if seen is not None and tick_marks(seen.obj).get(job) == tick:
            return Mark.MARKED  # our write landed
    return Mark.UNAVAILABLE
