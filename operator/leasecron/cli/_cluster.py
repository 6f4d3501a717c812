"""`leasecron cluster`: placeholder until its owner lands it."""

from __future__ import annotations

import click


@click.command("cluster")
def cluster() -> None:
    """Not available in this build."""
    raise click.ClickException("leasecron cluster is not available in this build")
