"""The kopf operator: validation, status, missed-run alarms, history, Lease lifecycle.
kopf wiring stays thin (`_kopf`); status logic lives in plain functions (`_jobstatus`,
`_missed`, `_history`, `_plan`) fed by watch-fed caches (`_world`) and carried out by the
reconcile loop (`_reconciler`). `OperatorProcess` runs one replica of it, with leader election
among replicas (`_main`). `crds` builds the CRDs (`crds/*.yaml`) from the models.

Names are imported on first use, so `leasecron.operator.crds` (which the demo and the test
helpers read) imports without kopf, that is without the operator extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'leasecron.operator' has no attribute {name!r}")
    return getattr(importlib.import_module("leasecron.operator._main"), name)
