"""The `leasecron` command line and the `kubectl-leasecron` plugin.

Each subcommand lives in its own private module, imported only when that subcommand runs:
`leasecron validate` never pays for importing kopf or the Kubernetes client. This module only
assembles the groups.
"""

from __future__ import annotations

import importlib

import click

from leasecron._version import __version__

# command name -> "module:attribute" of its click command
_COMMANDS: dict[str, str] = {
    "operator": "leasecron.cli._operator:operator_command",
    "status": "leasecron.cli._status:status",
    "leases": "leasecron.cli._inspect:leases",
    "runs": "leasecron.cli._inspect:runs",
    "validate": "leasecron.cli._validate:validate",
    "demo": "leasecron.cli._demo:demo",
    "cluster": "leasecron.cli._cluster:cluster",
    "bench": "leasecron.cli._bench:bench",
}
_PLUGIN_COMMANDS = ("status", "leases", "runs", "validate")


class _LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: object, lazy: tuple[str, ...], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module, _, attribute = _COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
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
    """kubectl leasecron: inspect ScheduledJobs, their holders and runs."""
