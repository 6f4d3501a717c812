"""The operator's writes of handed-over retries (docs/design.md §5.16, `models.handover`):
a run whose holder vanished during a retry back-off made a retry request, and one nobody
took by its bound finished with its last attempt's outcome. Both are conditional on the
version seen: a write of the run's holder (or a replica's pickup) meanwhile wins, and the
run is judged again on the next pass."""

from __future__ import annotations

from datetime import datetime

from leasecron._logs import get_logger
from leasecron.kube.errors import Conflict
from leasecron.models.handover import Handover, handover_message, handover_patch, unclaimed_patch
from leasecron.models.specs import JobRun
from leasecron.operator._facts import JobFacts
from leasecron.operator._observed import RunView
from leasecron.operator._world import World
from leasecron.operator._writes import Writer

_log = get_logger("leasecron.operator")


async def hand_over(
    writer: Writer, world: World, facts: JobFacts, run: RunView, owed: Handover
) -> None:
    """Make `run` a retry request: Pending, its attempts kept, labelled Retry."""
    ns = facts.ref.namespace
    message = handover_message(holder=run.holder, handover=owed)
    patch = handover_patch(resource_version=run.resource_version, message=message)
    try:
        world.note_run(await writer.patch_run(namespace=ns, name=run.name, patch=patch))
    except Conflict:
        return
    _log.warning(
        "run retry handed over",
        namespace=ns,
        job=facts.ref.name,
        run=run.name,
        holder=run.holder,
        attempt=owed.attempt,
    )


async def finish_unclaimed(
    writer: Writer, world: World, facts: JobFacts, run: RunView, owed: Handover, *, now: datetime
) -> None:
    """Finish a handed-over retry nobody took by its bound with its last attempt's outcome."""
    ns = facts.ref.namespace
    obj = world.run_object(ns, run.name)
    try:
        record = JobRun.from_resource(obj) if obj is not None else None
    except ValueError:
        record = None
    if record is None:
        return
    patch = unclaimed_patch(record, resource_version=run.resource_version, handover=owed, now=now)
    try:
        world.note_run(await writer.patch_run(namespace=ns, name=run.name, patch=patch))
    except Conflict:
        return
    _log.warning("handed-over retry not taken", namespace=ns, job=facts.ref.name, run=run.name)
