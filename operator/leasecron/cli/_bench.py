"""`leasecron bench`: placeholder until its owner lands it."""

from __future__ import annotations

import click


@click.command("bench")
def bench() -> None:
    """Not available in this build."""
    raise click.ClickException("leasecron bench is not available in this build")
