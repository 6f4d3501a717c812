"""Request-level fault injection for tests: which API requests a `Kube` fails, delays or cuts
short, installed as the Kube's transport wrapper (see docs/faults.md).

    from leasecron.testing.faults import Fault, fault_plan

    with fault_plan(kube).injected(Fault(verb="update", resource="leases", action="lose_reply")):
        ...  # the next Lease update lands, and its caller gets OutcomeUnknown

A replica process that a test starts calls `install_from_env(kube)` on the Kube it builds:
with $LEASECRON_FAULTS naming a JSON file, that Kube follows the file (re-read when it
changes); `FaultPlan.write(path)` writes one atomically. A Kube nobody installed a plan on
injects nothing, whatever the environment says.
"""

from __future__ import annotations

import os
from pathlib import Path

from leasecron.kube.clients import Kube
from leasecron.testing._fault_rules import Action, Fault, FaultPlan, FaultRule, load_faults
from leasecron.testing._injection import PlanWrapper

__all__ = [
    "ENV_VAR",
    "Action",
    "Fault",
    "FaultPlan",
    "FaultRule",
    "fault_plan",
    "install_from_env",
    "load_faults",
]

ENV_VAR = "LEASECRON_FAULTS"


def _installed(kube: Kube) -> FaultPlan | None:
    for wrapper in kube.transport_wrappers:
        if isinstance(wrapper, PlanWrapper):
            return wrapper.plan
    return None


def fault_plan(kube: Kube, *, path: Path | str | None = None) -> FaultPlan:
    """The FaultPlan of `kube`, installed as its transport wrapper on the first call (with
    the rules of the JSON file `path`, re-read when it changes, when given); later calls
    return the same plan. ValueError when `path` differs from the installed plan's file."""
    wanted = Path(path) if path is not None else None
    plan = _installed(kube)
    if plan is None:
        plan = FaultPlan(path=wanted)
        kube.wrap_transport(PlanWrapper(plan))
    elif wanted is not None and plan.path != wanted:
        raise ValueError(
            f"this Kube's fault plan follows {plan.path or 'no file'}, not {os.fspath(wanted)}"
        )
    return plan


def install_from_env(kube: Kube) -> FaultPlan | None:
    """For a replica process a test starts: when $LEASECRON_FAULTS names a file, install a
    plan that follows it on `kube` and return it; else do nothing and return None."""
    path = os.environ.get(ENV_VAR)
    return fault_plan(kube, path=path) if path else None
