"""`leasecron operator`: placeholder until its owner lands it."""

from __future__ import annotations

import click


@click.command("operator")
def operator_command() -> None:
    """Not available in this build."""
    raise click.ClickException("leasecron operator is not available in this build")
