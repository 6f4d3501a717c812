"""`leasecron status`: placeholder until its owner lands it."""

from __future__ import annotations

import click


@click.command("status")
def status() -> None:
    """Not available in this build."""
    raise click.ClickException("leasecron status is not available in this build")
