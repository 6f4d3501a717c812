"""`leasecron backfill JOB --from T1 --to T2` (also `kubectl leasecron backfill`): each tick of
the job's schedule in [T1, T2] that has no run on record runs once, in order, one at a time,
throttled; `--dry-run` lists them.

"On record" is any JobRun of the tick but a `Missed` one (`models.requests.backfill_ticks`): a
Missed tick is exactly what a backfill is for. Its Missed record is deleted on the condition
of its resourceVersion and the Backfill request created in its place: a JobRun's trigger and
requestedBy are immutable (its provenance never changes in place), and the precondition makes
a replica's or the operator's concurrent write to that record win over the backfill. Each
request is the same as `leasecron run`'s (`_runs`), picked up by a replica under a new claim,
and the next one is made only once it finished.

What it does not promise: to stop a request already made when interrupted (it is picked up, or
ends Missed after the job's startingDeadline).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from leasecron.cli._kubectl import Target, mapping, target_options
from leasecron.cli._runs import (
    JobOnRecord,
    Refused,
    check_runnable,
    create_request,
    describe_run,
    namespace_of,
    read_job,
    requester,
    run_async,
    wait_finished,
)
from leasecron.kube.clients import Kube
from leasecron.kube.errors import Conflict
from leasecron.kube.jobruns import JobRunStore
from leasecron.kube.objects import ObjectStore
from leasecron.models.durations import parse_duration
from leasecron.models.names import GROUP, JOBRUN_PLURAL, VERSION, format_tick, jobrun_name
from leasecron.models.requests import (
    DEFAULT_BACKFILL_LIMIT,
    BackfillPlan,
    TooManyTicks,
    backfill_ticks,
)
from leasecron.models.specs import Outcome, Trigger

PICKUP_MARGIN = timedelta(seconds=5)
"""How long past the job's startingDeadline a backfill waits for a replica to pick up one of
its requests before it stops (the operator finishes the request Missed)."""


def parse_moment(text: str) -> datetime:
    """An RFC 3339 / ISO 8601 time; without an offset it is UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError as e:
        raise click.BadParameter(f"{text!r} is not a time such as 2026-03-01T02:00:00Z") from e
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_throttle(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise click.BadParameter(f"{text!r} is not a duration such as 1s or 500ms") from e


def plan_lines(plan: BackfillPlan) -> list[str]:
    """What --dry-run prints: one line per tick to run, then the ticks on record."""
    lines = [
        f"{format_tick(t)}{'  (replaces its Missed record)' if t in plan.replaces_missed else ''}"
        for t in plan.run
    ]
    if plan.on_record:
        lines.append(f"{len(plan.on_record)} tick(s) in the range have a run on record:")
        lines.extend(f"  {format_tick(t)} {outcome}" for t, outcome in plan.on_record)
    return lines


async def _plan(
    kube: Kube,
    on_record: JobOnRecord,
    *,
    namespace: str,
    start: datetime,
    end: datetime,
    limit: int,
) -> BackfillPlan:
    job = on_record.job
    schedule = job.spec.parsed_schedule
    if schedule is None:
        raise Refused(f"{job.name} has no schedule, so no ticks to backfill")
    runs = await JobRunStore(kube).list(namespace=namespace, job=job.name)
    outcomes = {
        str(mapping(r.get("metadata")).get("name")): str(
            mapping(r.get("status")).get("outcome") or ""
        )
        for r in runs
        if mapping(r.get("spec")).get("job") == job.name
    }
    try:
        return backfill_ticks(
            schedule,
            start=start,
            end=end,
            limit=limit,
            outcomes=outcomes,
            job=job.name,
            latest=datetime.now(UTC) - job.spec.starting_deadline,
        )
    except TooManyTicks as e:
        raise Refused(str(e)) from e
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


async def _replace_missed(kube: Kube, *, namespace: str, name: str) -> bool:
    """Delete the Missed record `name` at the version read; False when it is not Missed any
    more (a replica took it over, or it changed meanwhile)."""
    store = ObjectStore(kube, group=GROUP, version=VERSION, plural=JOBRUN_PLURAL)
    obj = await store.get(namespace=namespace, name=name)
    if obj is None:
        return True
    if mapping(obj.get("status")).get("outcome") != Outcome.MISSED.value:
        return False
    version = str(mapping(obj.get("metadata")).get("resourceVersion") or "")
    try:
        await store.delete(namespace=namespace, name=name, resource_version=version)
    except Conflict:
        return False
    return True


async def _one(
    kube: Kube,
    on_record: JobOnRecord,
    *,
    namespace: str,
    tick: datetime,
    missed: bool,
    user: str,
) -> str:
    """Request tick `tick` and wait for it; its outcome (or why it was not run)."""
    job = on_record.job
    name = jobrun_name(job.name, tick)
    if missed and not await _replace_missed(kube, namespace=namespace, name=name):
        click.echo(f"{format_tick(tick)}: its Missed record changed meanwhile; left as it is")
        return "skipped"
    try:
        await create_request(
            kube, on_record, namespace=namespace, tick=tick, trigger=Trigger.BACKFILL, user=user
        )
    except Refused as e:
        if "already on record" not in e.message:
            raise
        click.echo(f"{format_tick(tick)}: {e.message}; skipped")
        return "skipped"
    pickup = (job.spec.starting_deadline + PICKUP_MARGIN).total_seconds()
    obj = await _picked_up(kube, namespace=namespace, name=name, timeout=pickup)
    if obj is None:
        raise Refused(
            f"{format_tick(tick)}: no replica picked up jobrun/{name} within startingDeadline; "
            f"backfill stopped (the request ends Missed)"
        )
    obj = await wait_finished(kube, namespace=namespace, name=name, timeout=None) or obj
    click.echo(f"{format_tick(tick)}: {describe_run(obj)}")
    return str(mapping(obj.get("status")).get("outcome") or "")


async def _picked_up(
    kube: Kube,
    *,
    namespace: str,
    name: str,
    timeout: float,  # noqa: ASYNC109
) -> dict[str, Any] | None:
    store = JobRunStore(kube)
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        obj = await store.get(namespace=namespace, name=name) or {}
        if mapping(obj.get("status")).get("outcome") != Outcome.PENDING.value:
            return obj
        if loop.time() >= end:
            return None
        await asyncio.sleep(0.2)


@click.command("backfill")
@click.argument("job")
@click.option(
    "--from",
    "start",
    required=True,
    help="First time of the range (RFC 3339; UTC without an offset).",
)
@click.option("--to", "end", required=True, help="Last time of the range, included.")
@click.option("--dry-run", is_flag=True, help="List the ticks that would run; request nothing.")
@click.option("--throttle", default="1s", show_default=True, help="Pause between two runs.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=DEFAULT_BACKFILL_LIMIT,
    show_default=True,
    help="Refuse a range with more ticks than this.",
)
@click.option("--force", is_flag=True, help="Backfill a suspended job anyway.")
@target_options
def backfill(
    job: str,
    start: str,
    end: str,
    dry_run: bool,
    throttle: str,
    limit: int,
    force: bool,
    target: Target,
) -> None:
    """Run each tick of JOB in [--from, --to] that has no run on record (a Missed one is
    replaced), once, in order, waiting for each; exit 0 only if every one succeeded."""
    namespace = namespace_of(target)
    first, last, pause = parse_moment(start), parse_moment(end), parse_throttle(throttle)

    async def main() -> None:
        kube = target.kube()
        try:
            on_record = await read_job(kube, namespace=namespace, name=job)
            if dry_run:
                plan = await _plan(
                    kube, on_record, namespace=namespace, start=first, end=last, limit=limit
                )
                click.echo(f"{len(plan.run)} tick(s) of {job} to run:")
                for line in plan_lines(plan):
                    click.echo(line)
                return
            user = await requester(kube, target)
            await check_runnable(kube, on_record, namespace=namespace, force=force, user=user)
            plan = await _plan(
                kube, on_record, namespace=namespace, start=first, end=last, limit=limit
            )
            click.echo(f"{len(plan.run)} tick(s) of {job} to run, {len(plan.on_record)} on record")
            outcomes = []
            for index, tick in enumerate(plan.run):
                if index:
                    await asyncio.sleep(pause.total_seconds())
                missed = tick in plan.replaces_missed
                outcomes.append(
                    await _one(
                        kube, on_record, namespace=namespace, tick=tick, missed=missed, user=user
                    )
                )
            failed = [o for o in outcomes if o not in (Outcome.SUCCEEDED.value, "skipped")]
            if failed:
                raise SystemExit(1)
        finally:
            await kube.close()

    run_async(main())
