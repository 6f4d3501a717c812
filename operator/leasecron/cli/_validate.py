"""`leasecron validate`: placeholder until its owner lands it."""

from __future__ import annotations

import click


@click.command("validate")
def validate() -> None:
    """Not available in this build."""
    raise click.ClickException("leasecron validate is not available in this build")
