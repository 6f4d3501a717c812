"""Benchmarks that print the figures of DESIGN.md section 8, against a real API server.

`run_elections` (handover: SIGTERM the leader; failover: SIGKILL it) and `run_ticks`
(replicas contending for once-per-tick claims) start replica processes
(`python -m leasecron.bench._replica`) against the cluster of $KUBECONFIG, or a throwaway
local control plane when it is unset; `run_cronjob` measures the Kubernetes CronJob controller
beside them. They print progress on stderr, a table on stdout and,
with `json_output`, the figures as the last line of stdout; they return the figures.
"""

from __future__ import annotations

from leasecron.bench._cronjob import run_cronjob
from leasecron.bench._elections import run_elections
from leasecron.bench._ticks import run_ticks

__all__ = ["run_cronjob", "run_elections", "run_ticks"]
