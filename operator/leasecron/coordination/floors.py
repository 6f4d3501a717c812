"""Token floors: the highest fencing token on record for a job, so that a job's Lease created
again (after `kubectl delete lease`, or its ScheduledJob deleted and applied again) starts
above every token already handed out (DESIGN §5).

Provisional: reads the fencing tokens of the job's JobRuns only.
"""

from __future__ import annotations

from leasecron.kube.clients import Kube
from leasecron.kube.jobruns import JobRunStore


async def token_floor(kube: Kube, *, namespace: str, job: str) -> int:
    """Highest fencing token on record for `job` (0 when none)."""
    runs = await JobRunStore(kube).list(namespace=namespace, job=job)
    tokens = [(run.get("spec") or {}).get("fencingToken") for run in runs]
    return max((t for t in tokens if isinstance(t, int)), default=0)
