"""The `leasecron` command line and the `kubectl-leasecron` plugin.

Each subcommand lives in its own private module; this module only assembles the group.
"""

from __future__ import annotations

import click

from leasecron._version import __version__
from leasecron.cli._bench import bench
from leasecron.cli._cluster import cluster
from leasecron.cli._demo import demo
from leasecron.cli._operator import operator_command
from leasecron.cli._status import status
from leasecron.cli._validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leasecron")
def main() -> None:
    """Scheduled jobs for many-replica apps on Kubernetes, coordinated with Leases."""


main.add_command(operator_command)
main.add_command(status)
main.add_command(validate)
main.add_command(demo)
main.add_command(cluster)
main.add_command(bench)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def kubectl_plugin() -> None:
    """kubectl leasecron: inspect ScheduledJobs, their holders and runs."""


kubectl_plugin.add_command(status)
kubectl_plugin.add_command(validate)
