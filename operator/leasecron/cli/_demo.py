"""`leasecron demo`: placeholder until its owner lands it."""

from __future__ import annotations

import click


@click.command("demo")
def demo() -> None:
    """Not available in this build."""
    raise click.ClickException("leasecron demo is not available in this build")
