"""`leasecron leases` and `leasecron runs JOB` (also `kubectl leasecron leases|runs`): who holds
which of leasecron's Leases, with the fencing token, when the grant expires and the last tick
claimed; and a job's JobRuns, newest first.

Owns the two tables (`lease_rows`, `run_rows`: pure, tested without a cluster) and one list
request each. Leases are selected by the label `leasecron.dev/role` (every role); "expires"
is judged from the Lease's renewTime on this machine's clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from leasecron.cli._kubectl import (
    NONE,
    Target,
    mapping,
    output_options,
    render_listing,
    show,
    target_options,
)
from leasecron.cli._status import ago, human_delta, run_start, time_of
from leasecron.kube.clients import Kube
from leasecron.kube.leases import LeaseStore
from leasecron.kube.objects import ObjectStore
from leasecron.models.leases import parse_lease
from leasecron.models.names import (
    GROUP,
    JOBRUN_PLURAL,
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    VERSION,
    format_tick,
)
from leasecron.models.specs import job_label_value

LEASE_HEADERS = ("NAME", "ROLE", "JOB/GROUP", "HOLDER", "TOKEN", "EXPIRES", "TICK")
LEASE_WIDE = ("ACQUIRED", "RENEWED", "DURATION")
RUN_HEADERS = ("NAME", "TICK", "HOLDER", "TOKEN", "OUTCOME", "DURATION", "AGE")
RUN_WIDE = ("MESSAGE",)


def _sorted(objs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(
        objs,
        key=lambda o: (
            str(mapping(o.get("metadata")).get("namespace") or ""),
            str(mapping(o.get("metadata")).get("name") or ""),
        ),
    )


def expires(obj: Mapping[str, Any], now: datetime) -> str:
    """`in 12s` while the grant runs, `free` when released, `expired 3m ago` after."""
    record = parse_lease(obj)
    if record.free:
        return "free"
    if record.renew_time is None or record.lease_duration_s is None:
        return NONE
    end = record.renew_time + timedelta(seconds=record.lease_duration_s)
    delta = (end - now).total_seconds()
    return f"in {human_delta(delta)}" if delta >= 0 else f"expired {human_delta(delta)} ago"


def lease_rows(
    objs: Sequence[Mapping[str, Any]], *, now: datetime, with_namespace: bool, wide: bool = False
) -> list[list[str]]:
    rows = []
    for obj in _sorted(objs):
        metadata = mapping(obj.get("metadata"))
        labels = mapping(metadata.get("labels"))
        record = parse_lease(obj)
        row = [
            str(metadata.get("name") or ""),
            str(labels.get(LABEL_ROLE) or NONE),
            str(labels.get(LABEL_JOB) or labels.get(LABEL_GROUP) or NONE),
            record.holder or NONE,
            str(record.transitions),
            expires(obj, now),
            format_tick(record.tick) if record.tick else NONE,
        ]
        if wide:
            duration = record.lease_duration_s
            row += [
                ago(record.acquire_time, now),
                ago(record.renew_time, now),
                NONE if duration is None else f"{duration}s",
            ]
        rows.append([str(metadata.get("namespace") or ""), *row] if with_namespace else row)
    return rows


def run_rows(
    objs: Sequence[Mapping[str, Any]], *, now: datetime, with_namespace: bool, wide: bool = False
) -> list[list[str]]:
    """Newest run first."""
    rows = []
    for obj in sorted(objs, key=run_start, reverse=True):
        metadata, spec, status = (mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
        token = spec.get("fencingToken")
        start, end = time_of(spec.get("start")), time_of(status.get("end"))
        duration = f"{(end - start).total_seconds():.1f}s" if start and end else NONE
        row = [
            str(metadata.get("name") or ""),
            str(spec.get("tick") or NONE),
            str(spec.get("holder") or NONE),
            NONE if token is None else str(token),
            str(status.get("outcome") or NONE),
            duration,
            ago(time_of(metadata.get("creationTimestamp")), now),
        ]
        if wide:
            row.append(str(status.get("message") or NONE))
        rows.append([str(metadata.get("namespace") or ""), *row] if with_namespace else row)
    return rows


@click.command("leases")
@target_options
@output_options
def leases(
    target: Target,
    output: str,
    watch: bool,
) -> None:
    """leasecron's Leases: role, job or group, holder, token, expiry, last tick claimed.

    The same Leases as `kubectl get leases -l leasecron.dev/role`."""

    async def fetch(kube: Kube) -> str:
        objs = await LeaseStore(kube).list(namespace=target.namespace, label_selector=LABEL_ROLE)
        return render_listing(
            _sorted(objs),
            output=output,
            namespace=target.namespace,
            kind="leasecron Leases",
            headers=LEASE_HEADERS,
            wide=LEASE_WIDE,
            rows=lambda with_namespace, wide: lease_rows(
                objs, now=datetime.now(UTC), with_namespace=with_namespace, wide=wide
            ),
        )

    show(fetch, target=target, watch=watch, what="Leases")


@click.command("runs")
@click.argument("job")
@target_options
@output_options
def runs(
    job: str,
    target: Target,
    output: str,
    watch: bool,
) -> None:
    """The JobRuns of ScheduledJob JOB, newest first: tick, holder, token, outcome, duration."""

    async def fetch(kube: Kube) -> str:
        store = ObjectStore(kube, group=GROUP, version=VERSION, plural=JOBRUN_PLURAL)
        selector = f"{LABEL_JOB}={job_label_value(job)}"
        objs = await store.list(namespace=target.namespace, label_selector=selector)
        return render_listing(
            sorted(objs, key=run_start, reverse=True),
            output=output,
            namespace=target.namespace,
            kind=f"JobRuns of {job}",
            headers=RUN_HEADERS,
            wide=RUN_WIDE,
            rows=lambda with_namespace, wide: run_rows(
                objs, now=datetime.now(UTC), with_namespace=with_namespace, wide=wide
            ),
        )

    show(fetch, target=target, watch=watch, what="JobRuns")
