"""The kopf operator: validation, status, missed-run alarms, history, Lease lifecycle.
kopf wiring stays thin (`_kopf`); status logic lives in plain functions (`_jobstatus`,
`_missed`, `_history`, `_plan`) fed by watch-fed caches (`_world`) and carried out by the
reconcile loop (`_reconciler`). `OperatorProcess` runs one replica of it, with leader election
among replicas (`_main`)."""

from leasecron.operator._main import (
    DEFAULT_LEASE,
    EXIT_FAILED,
    EXIT_LOST_LEADERSHIP,
    EXIT_OK,
    OperatorConfig,
    OperatorProcess,
)

__all__ = [
    "DEFAULT_LEASE",
    "EXIT_FAILED",
    "EXIT_LOST_LEADERSHIP",
    "EXIT_OK",
    "OperatorConfig",
    "OperatorProcess",
]
