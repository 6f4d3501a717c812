"""The `leasecron` command line and the `kubectl-leasecron` plugin.

Each subcommand lives in its own private module, imported only when that subcommand runs:
`leasecron validate` never pays for importing kopf or the Kubernetes client. A subcommand
that needs an optional extra (`leasecron[operator]`, `leasecron[testing]`) which is not
installed is still listed, and running it says which extra to install instead of failing
with an ImportError. This module only assembles the groups.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from leasecron._version import __version__

# command name -> "module:attribute" of its click command
_COMMANDS: dict[str, str] = {
    "operator": "leasecron.cli._operator:operator_command",
    "status": "leasecron.cli._status:status",
    "leases": "leasecron.cli._inspect:leases",
    "runs": "leasecron.cli._inspect:runs",
    "shards": "leasecron.cli._shards:shards",
    "run": "leasecron.cli._runs:run",
    "suspend": "leasecron.cli._runs:suspend",
    "resume": "leasecron.cli._runs:resume",
    "backfill": "leasecron.cli._backfill:backfill",
    "validate": "leasecron.cli._validate:validate",
    "demo": "leasecron.cli._demo:demo",
    "cluster": "leasecron.cli._cluster:cluster",
    "bench": "leasecron.cli._bench:bench",
}
_PLUGIN_COMMANDS = (
    "status",
    "leases",
    "runs",
    "validate",
    "run",
    "suspend",
    "resume",
    "backfill",
)
# command name -> the top-level modules it imports that only an extra installs
_NEEDS: dict[str, tuple[str, ...]] = {
    "operator": ("kopf",),
    "demo": ("cryptography", "sqlalchemy"),
    "cluster": ("cryptography",),
    "bench": ("cryptography", "kopf"),
}
# optional top-level module -> the extra that installs it
EXTRA_OF: dict[str, str] = {
    "kopf": "operator",
    "cryptography": "testing",
    "pytest": "testing",
    "sqlalchemy": "fencing",
    "psycopg": "fencing",
    "redis": "fencing",
}


def _missing_modules(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def missing_extra_command(name: str, missing: list[str]) -> click.Command:
    """A stand-in for subcommand `name` whose optional modules `missing` are not installed:
    listed with a note, and running it (any arguments) exits 1 naming the extra to install."""
    extras = sorted({EXTRA_OF.get(m, m) for m in missing})
    spec = f"leasecron[{','.join(extras)}]"
    message = (
        f"`leasecron {name}` needs the {' and '.join(extras)} extra "
        f"({', '.join(missing)} not installed): pip install '{spec}'"
    )

    def refuse() -> None:
        raise click.ClickException(message)

    return click.Command(
        name,
        callback=refuse,
        help=message,
        short_help=f"(needs {spec})",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class _LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: object, lazy: tuple[str, ...], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            missing = _missing_modules(_NEEDS.get(cmd_name, ()))
            if missing:
                return missing_extra_command(cmd_name, missing)
            module, _, attribute = _COMMANDS[cmd_name].partition(":")
            try:
                command = getattr(importlib.import_module(module), attribute)
            except ModuleNotFoundError as e:
                top = (e.name or "").partition(".")[0]
                if top not in EXTRA_OF:
                    raise
                return missing_extra_command(cmd_name, [top])
            if not isinstance(command, click.Command):
                raise TypeError(f"{_COMMANDS[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=_LazyGroup,
    lazy=tuple(_COMMANDS),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="leasecron")
def main() -> None:
    """Scheduled jobs for many-replica apps on Kubernetes, coordinated with Leases."""


@click.group(
    cls=_LazyGroup,
    lazy=_PLUGIN_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="kubectl leasecron")
def kubectl_plugin() -> None:
    """kubectl leasecron: inspect ScheduledJobs, their holders and runs; run, suspend, resume
    and backfill them."""
