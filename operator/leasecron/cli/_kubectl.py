"""What the inspection commands (`status`, `leases`, `runs`; also as `kubectl leasecron ...`)
share with kubectl: the flags `--kubeconfig`, `--context`, `-n/--namespace`,
`-A/--all-namespaces`, `-o table|wide|json|yaml` and `-w/--watch`, the namespace of the current
context, the table layout, and the watch loop.

Owns turning those flags into a `Target` and printing what a command fetched. `-w` re-reads
every `WATCH_INTERVAL_S` and prints the table again only when it changed (kubectl's `-w` prints
changed rows from a watch stream; a full table is easier to read for a handful of jobs). Does
not promise to notice a change that comes and goes between two reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click
import yaml

from leasecron.kube.clients import Kube

WATCH_INTERVAL_S = 2.0
OUTPUTS = ("table", "wide", "json", "yaml")
NONE = "-"
F = TypeVar("F", bound=Callable[..., Any])


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, kw_only=True)
class Target:
    """Which cluster and namespaces a command looks at. `namespace` None: all of them."""

    kubeconfig: str | None
    context: str | None
    namespace: str | None

    def kube(self) -> Kube:
        return Kube.from_config(kubeconfig=self.kubeconfig, context=self.context, max_workers=4)


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of `context` (default: the current one) in the kubeconfig, else
    "default"."""
    try:
        import kubernetes.config

        contexts, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
    except Exception:
        return "default"
    chosen = active
    if context:
        chosen = next((c for c in contexts or [] if mapping(c).get("name") == context), None)
    return str(mapping(mapping(chosen).get("context")).get("namespace") or "default")


def target_options(command: F) -> F:
    """Add kubectl's `--kubeconfig`, `--context`, `-n` and `-A` to a click command; the command
    receives `target: Target` instead of the four flags."""

    @functools.wraps(command)
    def with_target(
        *args: Any,
        kubeconfig: str | None,
        context: str | None,
        namespace: str | None,
        all_namespaces: bool,
        **kwargs: Any,
    ) -> Any:
        target = make_target(
            kubeconfig=kubeconfig,
            context=context,
            namespace=namespace,
            all_namespaces=all_namespaces,
        )
        return command(*args, target=target, **kwargs)

    options = [
        click.option(
            "--kubeconfig", default=None, envvar="KUBECONFIG", help="Path of a kubeconfig."
        ),
        click.option("--context", default=None, help="kubeconfig context [default: current]."),
        click.option("-n", "--namespace", default=None, help="Namespace [default: the context's]."),
        click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace."),
    ]
    decorated: Callable[..., Any] = with_target
    for option in reversed(options):
        decorated = option(decorated)
    return cast(F, decorated)


def make_target(
    *, kubeconfig: str | None, context: str | None, namespace: str | None, all_namespaces: bool
) -> Target:
    scope = None if all_namespaces else (namespace or context_namespace(kubeconfig, context))
    return Target(kubeconfig=kubeconfig, context=context, namespace=scope)


def output_options(command: F) -> F:
    """Add `-o table|wide|json|yaml` and `-w/--watch`."""
    command = click.option(
        "-w",
        "--watch",
        is_flag=True,
        help=f"Keep watching: print again whenever it changes (read every {WATCH_INTERVAL_S:g}s).",
    )(command)
    return click.option(
        "-o",
        "--output",
        type=click.Choice(OUTPUTS),
        default="table",
        show_default=True,
        help="table, wide (more columns), json or yaml (the objects as read).",
    )(command)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart (kubectl style)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        "   ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in [list(headers), *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def render_objects(objects: Sequence[Mapping[str, Any]], output: str) -> str:
    """A kubectl-style `List` of `objects` as JSON or YAML."""
    listed = {"apiVersion": "v1", "kind": "List", "items": [dict(o) for o in objects]}
    if output == "json":
        return json.dumps(listed, indent=2, default=str)
    return yaml.safe_dump(listed, sort_keys=False).rstrip()


def render_listing(
    objects: Sequence[Mapping[str, Any]],
    *,
    output: str,
    namespace: str | None,
    kind: str,
    headers: Sequence[str],
    wide: Sequence[str],
    rows: Callable[[bool, bool], Sequence[Sequence[str]]],
) -> str:
    """What a listing command prints: `objects` as JSON/YAML, a sentence when there are none
    (`No <kind> in namespace x.`), or the table of `rows(with_namespace, wide)` under
    `headers` (plus `wide` with -o wide, NAMESPACE first when listing all namespaces)."""
    if output in ("json", "yaml"):
        return render_objects(objects, output)
    if not objects:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        return f"No {kind} in {where}."
    columns = (*headers, *wide) if output == "wide" else tuple(headers)
    with_namespace = namespace is None
    table = rows(with_namespace, output == "wide")
    return render_table(("NAMESPACE", *columns) if with_namespace else columns, table)


def show(
    fetch: Callable[[Kube], Awaitable[str]], *, target: Target, watch: bool, what: str
) -> None:
    """Run `fetch` (which returns the text to print) once, or with `watch` until Ctrl-C,
    printing only when the text changed. API errors become one-line errors, exit 1."""

    async def once(kube: Kube) -> str:
        try:
            return await fetch(kube)
        except Exception as e:
            raise click.ClickException(f"cannot read {what}: {e}") from e

    async def main() -> None:
        try:
            kube = target.kube()
        except Exception as e:
            raise click.ClickException(f"cannot load the kubeconfig: {e}") from e
        try:
            shown = await once(kube)
            click.echo(shown)
            while watch:
                started = time.monotonic()
                text = await once(kube)
                if text != shown:
                    click.echo("")
                    click.echo(text)
                    shown = text
                await asyncio.sleep(max(0.0, WATCH_INTERVAL_S - (time.monotonic() - started)))
        finally:
            await kube.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
