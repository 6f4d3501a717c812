"""Request-level fault injection for tests: which API requests a `Kube` fails, delays or cuts
short. The public face of `leasecron.kube.faults` (see docs/faults.md).

    from leasecron.testing.faults import Fault, FaultPlan

    with kube.faults.injected(Fault(verb="update", resource="leases", action="lose_reply")):
        ...  # the next Lease update lands, and its caller gets OutcomeUnknown

Replica processes load a plan from the JSON file named in $LEASECRON_FAULTS (re-read when it
changes); `FaultPlan.write(path)` writes one atomically.
"""

from __future__ import annotations

from leasecron.kube.faults import ENV_VAR, Action, Fault, FaultPlan, FaultRule, load_faults

__all__ = ["ENV_VAR", "Action", "Fault", "FaultPlan", "FaultRule", "load_faults"]
