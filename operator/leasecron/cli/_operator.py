"""`leasecron operator`: run the operator (the Helm chart starts it with these flags).

Owns parsing the flags into an `OperatorConfig` (durations are checked when the election
config is built, and a bad value is reported naming the flag) and the process exit code:
0 after SIGTERM, 3 when leadership was lost (the pod restarts as a standby), 1 on failure.
An operator that a test starts with $LEASECRON_FAULTS set follows that fault file
(`leasecron.testing.faults.install_from_env`, docs/faults.md); otherwise nothing is installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import click

from leasecron._logs import configure
from leasecron.models.configs import ConfigError, ElectionConfig
from leasecron.models.durations import parse_duration
from leasecron.models.identity import make_identity
from leasecron.operator import DEFAULT_LEASE, OperatorConfig, OperatorProcess

POD_NAMESPACE_ENV = "POD_NAMESPACE"


def _election(lease_duration: str, renew_deadline: str, retry_period: str) -> ElectionConfig:
    try:
        return ElectionConfig(
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
        )
    except ConfigError as e:
        flags = str(e)
        for field, flag in (
            ("leaseDuration", "--election-lease-duration"),
            ("renewDeadline", "--election-renew-deadline"),
            ("retryPeriod", "--election-retry-period"),
        ):
            flags = flags.replace(field, flag)
        raise click.BadParameter(flags) from e


def _duration(flag: str, text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise click.BadParameter(f"{flag} {text!r}: {e}") from e


@click.command("operator")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NS",
    help="Namespace to watch (repeatable). None: every namespace.",
)
@click.option(
    "--metrics-port",
    type=int,
    default=9090,
    show_default=True,
    help="Port of the Prometheus /metrics endpoint (0 disables it).",
)
@click.option(
    "--health-port",
    type=int,
    default=8080,
    show_default=True,
    help="Port of /healthz and /readyz (0 disables them).",
)
@click.option(
    "--bind-address",
    default="0.0.0.0",
    show_default=True,
    help="Address the metrics and health endpoints listen on.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
@click.option(
    "--election-lease-duration",
    default="15s",
    show_default=True,
    help="How long a standby waits after the Lease last changed before taking over.",
)
@click.option(
    "--election-renew-deadline",
    default="10s",
    show_default=True,
    help="How long the leader keeps trying to renew before it steps down.",
)
@click.option(
    "--election-retry-period",
    default="2s",
    show_default=True,
    help="Interval between the leader's renewals.",
)
@click.option(
    "--election-lease-name",
    default=DEFAULT_LEASE,
    show_default=True,
    help="Name of the election Lease.",
)
@click.option(
    "--election-namespace",
    default=None,
    help="Namespace of the election Lease [default: $POD_NAMESPACE or default].",
)
@click.option(
    "--run-record-grace",
    default="30s",
    show_default=True,
    help="How long past a claimed tick's startingDeadline its JobRun may take to appear "
    "before the tick is alarmed as MissedRun.",
)
@click.option(
    "--floor-record-limit",
    default="30s",
    show_default=True,
    help="How long a ScheduledJob's deletion waits for its last fencing token to be recorded "
    "(retried while the API server refuses) before it goes ahead without it.",
)
@click.option(
    "--identity",
    default=None,
    help="This replica's identity in the election [default: pod name + suffix].",
)
def operator_command(
    namespaces: tuple[str, ...],
    metrics_port: int,
    health_port: int,
    bind_address: str,
    log_level: str,
    election_lease_duration: str,
    election_renew_deadline: str,
    election_retry_period: str,
    election_lease_name: str,
    election_namespace: str | None,
    run_record_grace: str,
    floor_record_limit: str,
    identity: str | None,
) -> None:
    """Run the leasecron operator: validation, status, missed-run alarms, history, Leases."""
    election = _election(election_lease_duration, election_renew_deadline, election_retry_period)
    grace = _duration("--run-record-grace", run_record_grace)
    limit = _duration("--floor-record-limit", floor_record_limit)
    configure(level=log_level)
    config = OperatorConfig(
        identity=identity or make_identity(),
        namespaces=tuple(dict.fromkeys(namespaces)),
        election=election,
        election_namespace=election_namespace or os.environ.get(POD_NAMESPACE_ENV) or "default",
        election_lease=election_lease_name,
        metrics_port=metrics_port,
        health_port=health_port,
        bind_address=bind_address,
        run_record_grace=grace,
        floor_record_limit=limit,
    )
    from leasecron.testing.faults import install_from_env  # stdlib and leasecron only

    code = asyncio.run(OperatorProcess(config, prepare_kube=install_from_env).run())
    sys.exit(code)
