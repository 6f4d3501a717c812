"""`leasecron status` / `kubectl leasecron status`: one line per ScheduledJob with its bucket,
holder, last run, outcome, next tick, readiness and how many live replicas cover its handler.

The columns come from the status the operator keeps. When the operator is not running (no
replica holds its election Lease, or it never wrote a job's status), the holder, last run,
outcome, next tick and replicas are read from the Leases and JobRuns themselves, and the
command says so on stderr; READY then shows `-`, because only the operator judges it.

Owns the rows (`status_rows`, `fallback_status`: pure, tested without a cluster) and three list
requests (jobs, Leases, JobRuns). Does not promise that a holder read from a Lease is still
live: it judges expiry by the Lease's renewTime on this machine's clock, as a person would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
from leasecron.coordination.members import advertised_handlers
from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import ScheduledJobStore
from leasecron.kube.leases import LeaseStore
from leasecron.kube.objects import ObjectStore
from leasecron.models.groups import GroupState, group_lease_name, recorded_state
from leasecron.models.leases import LeaseRecord, parse_lease, parse_micro_time
from leasecron.models.names import (
    GROUP,
    JOBRUN_PLURAL,
    LABEL_COMPONENT,
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    VERSION,
    job_lease_name,
)
from leasecron.models.schedules import Schedule, ScheduleError
from leasecron.models.vocabulary import (
    COMPONENT_OPERATOR,
    LEGACY_OPERATOR,
    Role,
    is_operator_lease,
    role_of,
)

HEADERS = ("NAME", "BUCKET", "HOLDER", "LAST RUN", "OUTCOME", "NEXT", "READY", "REPLICAS")
WIDE = ("SCHEDULE", "GROUP", "TOKEN", "MISSED")
NO_OPERATOR = (
    "note: no operator holds its election Lease; holder, last run and replicas are read "
    "from Leases and JobRuns, and READY is unknown"
)
NO_STATUS = (
    "note: the operator has not written the status of {count} job(s) yet; their holder, last "
    "run and replicas are read from Leases and JobRuns"
)


def time_of(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_micro_time(value)
    except ValueError:
        return None


def human_delta(seconds: float) -> str:
    """`45s`, `12m`, `3h`, `5d`, as kubectl prints ages."""
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def ago(moment: datetime | None, now: datetime) -> str:
    return f"{human_delta((now - moment).total_seconds())} ago" if moment else NONE


def until(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return NONE
    delta = (moment - now).total_seconds()
    return f"in {human_delta(delta)}" if delta >= 0 else f"{human_delta(delta)} late"


def run_start(run: Mapping[str, Any]) -> str:
    """A JobRun's sort key: its start, else its tick (RFC 3339 strings sort as times)."""
    spec = mapping(run.get("spec"))
    return str(spec.get("start") or spec.get("tick") or "")


def live_holder(record: LeaseRecord | None, now: datetime) -> str:
    """The Lease's holder while its grant runs (renewTime + duration after `now`), else ""."""
    if record is None or record.free or record.renew_time is None:
        return ""
    duration = timedelta(seconds=record.lease_duration_s or 0)
    return record.holder if record.renew_time + duration > now else ""


def _ready(status: Mapping[str, Any]) -> str:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            value, reason = condition.get("status"), condition.get("reason")
            return f"{value}" if value == "True" else f"{value} ({reason})"
    return NONE


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """What the fallback reads besides the jobs: leasecron's Leases and the JobRuns."""

    leases: Sequence[Mapping[str, Any]] = ()
    runs: Sequence[Mapping[str, Any]] = ()

    def lease_object(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        for obj in self.leases:
            metadata = mapping(obj.get("metadata"))
            if metadata.get("namespace") == namespace and metadata.get("name") == name:
                return obj
        return None

    def lease(self, namespace: str, name: str) -> LeaseRecord | None:
        obj = self.lease_object(namespace, name)
        return parse_lease(obj) if obj is not None else None

    def grant_lease(self, namespace: str, name: str, spec: Mapping[str, Any]) -> str | None:
        """The Lease whose holder runs the job: its own (single-owner), or the shard Lease of
        its group that claims its ticks (once-per-tick)."""
        bucket = spec.get("bucket")
        if bucket == "single-owner":
            return job_lease_name(name)
        if bucket != "once-per-tick":
            return None
        group = str(spec.get("group") or "default")
        return self.group_state(namespace, group).ref(group, name).lease

    def group_state(self, namespace: str, group: str) -> GroupState:
        """The group record's state; `DEFAULT_SHARDS` without a readable record."""
        return recorded_state(self.lease_object(namespace, group_lease_name(group)))

    def operator_running(self, now: datetime) -> bool:
        operators = [
            o
            for o in self.leases
            if is_operator_lease(mapping(mapping(o.get("metadata")).get("labels")))
        ]
        return any(live_holder(parse_lease(o), now) for o in operators)


def _covering_replicas(
    cluster: Cluster, *, namespace: str, name: str, spec: Mapping[str, Any], now: datetime
) -> int:
    """Live member Leases of the job's group whose replica registered the job's handler."""
    group, handler = str(spec.get("group") or "default"), str(spec.get("handler") or name)
    count = 0
    for obj in cluster.leases:
        metadata = mapping(obj.get("metadata"))
        labels = mapping(metadata.get("labels"))
        if metadata.get("namespace") != namespace or role_of(labels) != Role.MEMBER:
            continue
        if labels.get(LABEL_GROUP) != group or not live_holder(parse_lease(obj), now):
            continue
        if handler in advertised_handlers(obj):
            count += 1
    return count


def fallback_status(obj: Mapping[str, Any], cluster: Cluster, *, now: datetime) -> dict[str, Any]:
    """The status columns of one job as Leases and JobRuns tell them, without the operator."""
    metadata, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    grant = cluster.grant_lease(namespace, name, spec)
    status: dict[str, Any] = {
        "holder": live_holder(cluster.lease(namespace, grant), now) if grant else "",
        "replicas": _covering_replicas(cluster, namespace=namespace, name=name, spec=spec, now=now),
    }
    runs = [
        r
        for r in cluster.runs
        if mapping(r.get("metadata")).get("namespace") == namespace
        and mapping(r.get("spec")).get("job") == name
    ]
    if runs:
        newest = max(runs, key=run_start)
        run_spec, run_status = mapping(newest.get("spec")), mapping(newest.get("status"))
        status["lastRun"] = {
            "tick": run_spec.get("tick"),
            "start": run_spec.get("start"),
            "holder": run_spec.get("holder"),
            "fencingToken": run_spec.get("fencingToken"),
            "outcome": run_status.get("outcome"),
        }
    schedule = spec.get("schedule")
    if (
        isinstance(schedule, str)
        and spec.get("bucket") != "single-owner"
        and not spec.get("suspend")
    ):
        try:
            parsed = Schedule.parse(schedule, time_zone=str(spec.get("timeZone") or "UTC"))
            status["nextScheduleTime"] = parsed.next_after(now).strftime("%Y-%m-%dT%H:%M:%SZ")
        except ScheduleError:
            pass
    return status


def status_row(
    obj: Mapping[str, Any],
    *,
    now: datetime,
    with_namespace: bool,
    wide: bool = False,
    status: Mapping[str, Any] | None = None,
) -> list[str]:
    """The table row of one ScheduledJob (`status`: instead of the object's own)."""
    metadata, spec = mapping(obj.get("metadata")), mapping(obj.get("spec"))
    status = mapping(obj.get("status")) if status is None else status
    last = mapping(status.get("lastRun"))
    last_at = time_of(last.get("start")) or time_of(last.get("tick")) or time_of(last.get("end"))
    row = [
        str(metadata.get("name") or ""),
        str(spec.get("bucket") or NONE),
        str(status.get("holder") or NONE),
        ago(last_at, now),
        str(last.get("outcome") or NONE),
        until(time_of(status.get("nextScheduleTime")), now),
        _ready(status),
        str(status.get("replicas", NONE)),
    ]
    if wide:
        token = last.get("fencingToken")
        row += [
            str(spec.get("schedule") or NONE),
            str(spec.get("group") or "default"),
            NONE if token is None else str(token),
            str(status.get("missedRuns", 0)),
        ]
    return [str(metadata.get("namespace") or ""), *row] if with_namespace else row


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = mapping(obj.get("metadata"))
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def needs_fallback(obj: Mapping[str, Any]) -> bool:
    """True when the operator never wrote this job's status."""
    return mapping(obj.get("status")).get("observedGeneration") is None


def status_rows(
    objs: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    with_namespace: bool,
    wide: bool = False,
    cluster: Cluster | None = None,
) -> tuple[list[list[str]], list[str]]:
    """Rows sorted by namespace and name, and the notes to print about where they came from.
    With `cluster`, jobs without an operator-written status (all of them when no operator
    holds its Lease) are filled from Leases and JobRuns."""
    notes: list[str] = []
    operator_down = cluster is not None and not cluster.operator_running(now)
    stale = [o for o in objs if needs_fallback(o)]
    if cluster is not None and objs:
        if operator_down:
            notes.append(NO_OPERATOR)
        elif stale:
            notes.append(NO_STATUS.format(count=len(stale)))
    rows = []
    for obj in sorted(objs, key=_key):
        status = None
        if cluster is not None and (operator_down or needs_fallback(obj)):
            status = fallback_status(obj, cluster, now=now)
        rows.append(
            status_row(obj, now=now, with_namespace=with_namespace, wide=wide, status=status)
        )
    return rows, notes


async def _read(kube: Kube, target: Target) -> tuple[list[dict[str, Any]], Cluster]:
    jobs = await ScheduledJobStore(kube).list(namespace=target.namespace)
    leases = await LeaseStore(kube).list(namespace=target.namespace, label_selector=LABEL_ROLE)
    try:  # the operator's election Lease lives in its own namespace
        operators = [
            lease
            for selector in (
                f"{LABEL_COMPONENT}={COMPONENT_OPERATOR}",
                f"{LABEL_ROLE}={LEGACY_OPERATOR}",
            )
            for lease in await LeaseStore(kube).list(namespace=None, label_selector=selector)
        ]
    except Exception:
        operators = []
    runs_store = ObjectStore(kube, group=GROUP, version=VERSION, plural=JOBRUN_PLURAL)
    runs = await runs_store.list(namespace=target.namespace, label_selector=LABEL_JOB)
    return jobs, Cluster(leases=[*leases, *operators], runs=runs)


@click.command("status")
@target_options
@output_options
def status(
    target: Target,
    output: str,
    watch: bool,
) -> None:
    """ScheduledJobs: bucket, holder, last run, outcome, next tick, ready, replicas.

    Works without the operator: then the columns are read from Leases and JobRuns, and a note
    on stderr says so."""

    async def fetch(kube: Kube) -> str:
        jobs, cluster = await _read(kube, target)

        def rows(with_namespace: bool, wide: bool) -> list[list[str]]:
            table, notes = status_rows(
                jobs,
                now=datetime.now(UTC),
                with_namespace=with_namespace,
                wide=wide,
                cluster=cluster,
            )
            for note in notes:
                click.echo(note, err=True)
            return table

        return render_listing(
            jobs,
            output=output,
            namespace=target.namespace,
            kind="ScheduledJobs",
            headers=HEADERS,
            wide=WIDE,
            rows=rows,
        )

    show(fetch, target=target, watch=watch, what="ScheduledJobs")
