"""`leasecron shards GROUP`: a group's record (shard count, token ceiling, floor tick) and its
shard Leases; with `--count N`, the deliberate change of the group's shard count
(`coordination.groups.change_shard_count`, whose steps it prints as they happen).

Owns the table of a group's shard Leases (`shard_rows`: pure) and the wording; the protocol
lives in `coordination.groups`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import click

from leasecron.cli._kubectl import NONE, Target, mapping, render_table, target_options
from leasecron.cli._status import live_holder
from leasecron.coordination.groups import ShardCountChange, ShardCountError, change_shard_count
from leasecron.coordination.members import member_selector
from leasecron.kube.clients import Kube
from leasecron.kube.errors import KubeError
from leasecron.kube.leases import LeaseStore
from leasecron.models.groups import (
    GroupRecordError,
    GroupState,
    group_lease_name,
    parse_group,
    retired,
)
from leasecron.models.leases import lease_annotations, parse_lease
from leasecron.models.names import LABEL_GROUP, LABEL_JOB, LABEL_ROLE, format_tick
from leasecron.models.shards import (
    LABEL_SHARD,
    MAX_SHARDS,
    OWN_SHARD,
    SHARDS_PER_REPLICA,
    shard_lease_name,
    shards_for,
)

SHARD_HEADERS = ("NAME", "STATE", "HOLDER", "TOKEN", "TICK")


def shard_rows(objs: Sequence[Mapping[str, Any]], *, group: str, shards: int) -> list[list[str]]:
    """One row per shard Lease: `current` (of the recorded count), `retired`, `unused` (of
    another count, not retired: a replica that does not follow the record), or `own <job>`
    (a job's own shard Lease, of no count)."""
    current = {shard_lease_name(group, i, shards=shards) for i in range(shards)}
    rows = []
    for obj in sorted(objs, key=lambda o: str(mapping(o.get("metadata")).get("name") or "")):
        name = str(mapping(obj.get("metadata")).get("name") or "")
        record = parse_lease(obj)
        labels = mapping(mapping(obj.get("metadata")).get("labels"))
        if labels.get(LABEL_SHARD) == OWN_SHARD:
            state = f"own {labels.get(LABEL_JOB) or NONE}"
        elif retired(lease_annotations(obj)):
            state = "retired"
        else:
            state = "current" if name in current else "unused"
        tick = format_tick(record.tick) if record.tick else NONE
        rows.append([name, state, record.holder or NONE, str(record.transitions), tick])
    return rows


def describe(state: GroupState, *, group: str) -> str:
    floor = format_tick(state.floor_tick) if state.floor_tick else NONE
    own = f", jobs on Leases of their own: {len(state.own)}" if state.own else ""
    return (
        f"group {group}: {state.shards} shards, token ceiling {state.ceiling}, floor tick {floor}"
        f"{own}"
    )


async def _show(kube: Kube, *, namespace: str, group: str) -> str:
    leases = LeaseStore(kube)
    obj = await leases.get(namespace=namespace, name=group_lease_name(group))
    if obj is None:
        return f"group {group} has no record in namespace {namespace} yet (no replica started)"
    state = parse_group(lease_annotations(obj))
    selector = f"{LABEL_ROLE}=shard,{LABEL_GROUP}={group}"
    objs = await leases.list(namespace=namespace, label_selector=selector)
    rows = shard_rows(objs, group=group, shards=state.shards)
    table = render_table(SHARD_HEADERS, rows) if rows else "no shard Leases yet"
    members = await leases.list(namespace=namespace, label_selector=member_selector(group))
    now = datetime.now(UTC)
    replicas = sum(1 for o in members if live_holder(parse_lease(o), now))
    sizing = sizing_advice(state.shards, replicas, group=group)
    return f"{describe(state, group=group)}\n{sizing}\n\n{table}"


def sizing_advice(shards: int, replicas: int, *, group: str) -> str:
    """How the group's shards spread over its live replicas, and the count that spreads an
    instant's runs within ±20 % when this one is too small for them."""
    if replicas == 0:
        return "no live replica of the group"
    line = f"{replicas} live replicas: {shards / replicas:.1f} shards per replica"
    if shards >= SHARDS_PER_REPLICA * replicas or shards >= MAX_SHARDS:
        return line
    return (
        f"{line}; an instant's runs may spread unevenly below {SHARDS_PER_REPLICA} per "
        f"replica: leasecron shards {group} --count {shards_for(replicas)}"
    )


def _summary(change: ShardCountChange, *, namespace: str) -> str:
    if change.dry_run:
        return "dry run: nothing written"
    if change.after == change.before:
        return describe(change.after, group=change.group)
    lines = [
        describe(change.after, group=change.group),
        "Replicas follow the new count as soon as they see the record; instants up to the "
        "floor tick count as claimed.",
    ]
    if change.retired:
        names = " ".join(change.retired)
        lines.append(
            f"The {len(change.retired)} retired shard Leases of {change.before.shards} shards "
            "take no claims; delete them once no run under them goes (they must be gone "
            f"before the count returns to {change.before.shards}):\n"
            f"  kubectl delete lease -n {namespace} {names}"
        )
    return "\n".join(lines)


@click.command("shards")
@click.argument("group")
@click.option(
    "--count",
    type=click.IntRange(1, MAX_SHARDS),
    default=None,
    help="Change the group's shard count to this (default: only show the record).",
)
@click.option("--dry-run", is_flag=True, help="Say what --count would do; write nothing.")
@target_options
def shards(group: str, count: int | None, dry_run: bool, target: Target) -> None:
    """The shard count of GROUP, its token ceiling and shard Leases; with --count, change it.

    Changing the count retires every shard Lease of the old count, then records the new count
    with the highest instant the old shards claimed: no instant runs twice and no fencing
    token goes down. Running it again after a failure continues where it stopped.

    Sizing: a shard's jobs run on one replica per instant; with at least 5 shards per replica
    an instant's runs spread within 20 % of the mean (the default 32 fits up to 6 replicas).
    Without --count it prints the live replicas and, when they need one, the count to give."""
    namespace = target.namespace
    if namespace is None:
        raise click.ClickException("a group's shard count is per namespace: give -n, not -A")

    async def main() -> None:
        kube = target.kube()
        try:
            if count is None:
                click.echo(await _show(kube, namespace=namespace, group=group))
                return
            change = await change_shard_count(
                kube,
                namespace=namespace,
                group=group,
                shards=count,
                dry_run=dry_run,
                report=click.echo,
            )
            click.echo(_summary(change, namespace=namespace))
        finally:
            await kube.close()

    try:
        asyncio.run(main())
    except (ShardCountError, GroupRecordError) as e:
        raise click.ClickException(str(e)) from e
    except KubeError as e:
        raise click.ClickException(f"the API server failed: {e}; run it again to continue") from e
