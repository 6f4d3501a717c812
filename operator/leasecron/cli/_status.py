"""`leasecron status` / `kubectl leasecron status [-n NS] [-A]`: one line per ScheduledJob with
its bucket, holder, last run, outcome, next tick, readiness and how many live replicas cover
its handler, as the operator keeps them in status.

Owns the table (`status_rows`, `render_table`: pure, tested without a cluster) and one list
request. It shows what the operator last wrote; with no operator running, the columns stay
empty.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import click

from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import ScheduledJobStore
from leasecron.models.leases import parse_micro_time

HEADERS = ("NAME", "BUCKET", "HOLDER", "LAST RUN", "OUTCOME", "NEXT", "READY", "REPLICAS")
_NONE = "-"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _time(value: object) -> datetime | None:
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


def _ago(moment: datetime | None, now: datetime) -> str:
    return f"{human_delta((now - moment).total_seconds())} ago" if moment else _NONE


def _until(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return _NONE
    delta = (moment - now).total_seconds()
    return f"in {human_delta(delta)}" if delta >= 0 else f"{human_delta(delta)} late"


def _ready(status: Mapping[str, Any]) -> str:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            value, reason = condition.get("status"), condition.get("reason")
            return f"{value}" if value == "True" else f"{value} ({reason})"
    return _NONE


def status_row(obj: Mapping[str, Any], *, now: datetime, with_namespace: bool) -> list[str]:
    """The table row of one ScheduledJob."""
    metadata, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    last = _mapping(status.get("lastRun"))
    last_at = _time(last.get("start")) or _time(last.get("tick")) or _time(last.get("end"))
    row = [
        str(metadata.get("name") or ""),
        str(spec.get("bucket") or _NONE),
        str(status.get("holder") or _NONE),
        _ago(last_at, now),
        str(last.get("outcome") or _NONE),
        _until(_time(status.get("nextScheduleTime")), now),
        _ready(status),
        str(status.get("replicas", _NONE)),
    ]
    return [str(metadata.get("namespace") or ""), *row] if with_namespace else row


def status_rows(
    objs: Sequence[Mapping[str, Any]], *, now: datetime, with_namespace: bool
) -> list[list[str]]:
    """Rows sorted by namespace and name."""
    ordered = sorted(
        objs,
        key=lambda o: (
            str(_mapping(o.get("metadata")).get("namespace") or ""),
            str(_mapping(o.get("metadata")).get("name") or ""),
        ),
    )
    return [status_row(obj, now=now, with_namespace=with_namespace) for obj in ordered]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl style)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in [list(headers), *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def _current_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context, else "default"."""
    try:
        import kubernetes.config

        _, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
    except Exception:
        return "default"
    return str(_mapping(_mapping(active).get("context")).get("namespace") or "default")


async def _list(kubeconfig: str | None, namespace: str | None) -> list[dict[str, Any]]:
    kube = Kube.from_config(kubeconfig=kubeconfig, max_workers=2)
    try:
        return await ScheduledJobStore(kube).list(namespace=namespace)
    finally:
        await kube.close()


@click.command("status")
@click.option("-n", "--namespace", default=None, help="Namespace [default: the context's].")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace.")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", help="Path of a kubeconfig.")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def status(
    namespace: str | None, all_namespaces: bool, kubeconfig: str | None, output: str
) -> None:
    """Show ScheduledJobs: bucket, holder, last run, outcome, next tick, ready, replicas."""
    scope = None if all_namespaces else (namespace or _current_namespace(kubeconfig))
    try:
        objs = asyncio.run(_list(kubeconfig, scope))
    except Exception as e:
        raise click.ClickException(f"cannot list ScheduledJobs: {e}") from e
    if output == "json":
        click.echo(
            json.dumps(
                [{"metadata": o.get("metadata", {}), "status": o.get("status", {})} for o in objs],
                indent=2,
            )
        )
        return
    if not objs:
        where = "any namespace" if scope is None else f"namespace {scope}"
        click.echo(f"No ScheduledJobs in {where}.")
        return
    headers = ("NAMESPACE", *HEADERS) if scope is None else HEADERS
    rows = status_rows(objs, now=datetime.now(UTC), with_namespace=scope is None)
    click.echo(render_table(headers, rows))
