"""`leasecron demo`: the three buckets at work on a throwaway local cluster.

    leasecron demo [--seconds 60] [--replicas 3] [--json] [--kubeconfig PATH] [--ledger-url URL]

Starts a local control plane (unless --kubeconfig names a cluster), applies the CRDs and the
example ScheduledJobs, runs N replicas of `leasecron.demo.example_app`, prints one line per
tick, kills the single-owner's holder half way and prints a summary; `--json` makes the last
line of stdout the summary as one JSON object. Owns the command line only; the demo itself is
`leasecron.demo.run_demo`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from leasecron import _logs

_INTERRUPTED = 130


def _say(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()


@click.command("demo")
@click.option(
    "--seconds",
    type=float,
    default=60.0,
    show_default=True,
    help="How long the replicas run once they are all ready (at least 10).",
)
@click.option(
    "--replicas",
    type=int,
    default=3,
    show_default=True,
    help="How many replicas of the example app to run.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary as one JSON object on the last line of stdout.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Use this cluster (admin rights; a new namespace is created and deleted) instead of "
    "starting a local control plane.",
)
@click.option(
    "--ledger-url",
    envvar="LEASECRON_DEMO_LEDGER_URL",
    default=None,
    help="The example app's database as a URL (postgresql+psycopg://user@host/db; its demo "
    "tables are emptied first); default: a SQLite file in the demo's work directory.",
)
def demo(
    seconds: float, replicas: int, as_json: bool, kubeconfig: Path | None, ledger_url: str | None
) -> None:
    """Show every-replica, once-per-tick and single-owner jobs on N replicas, with a failover."""
    from leasecron.demo import DemoError, DemoOptions, format_summary, run_demo
    from leasecron.kube.errors import KubeError
    from leasecron.testing import ControlPlaneError

    try:
        options = DemoOptions(
            seconds=seconds, replicas=replicas, kubeconfig=kubeconfig, ledger_url=ledger_url
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    _logs.configure(level="warning", json=False)
    try:
        summary = run_demo(options, say=_say)
    except KeyboardInterrupt:
        click.echo("[demo] interrupted: replicas and control plane stopped", err=True)
        sys.exit(_INTERRUPTED)
    except (DemoError, ControlPlaneError, KubeError) as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        _say(json.dumps(summary.as_json(), sort_keys=True))
    else:
        for line in format_summary(summary):
            _say(line)
