"""leasecron: scheduled jobs for many-replica Python apps on Kubernetes.

The public library API is re-exported here and only here:

    import leasecron

    scheduler = leasecron.Scheduler("billing-api")

    @scheduler.job("nightly_report")
    def nightly_report(ctx: leasecron.JobContext) -> None:
        ctx.logger.info("running", token=ctx.token)

    scheduler.run_forever()

Names are imported on first use, so `import leasecron` stays cheap for tools (the CLI, the
pytest plugin) that need none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from leasecron._version import __version__

if TYPE_CHECKING:
    from leasecron._metrics import MetricsServer, serve_metrics
    from leasecron.coordination import (
        BackgroundLoop,
        Elector,
        Grant,
        KeepAlive,
        LostLockError,
        Skipped,
        SyncElector,
        SyncTickLock,
        Term,
        TickLock,
        lease_informer,
    )
    from leasecron.models.configs import ConfigError, ElectionConfig, LockConfig
    from leasecron.models.identity import make_identity
    from leasecron.models.specs import Bucket
    from leasecron.runtime import JobContext, RunResult, Scheduler, Tuning

_EXPORTS = {
    "Bucket": "leasecron.models.specs",
    "JobContext": "leasecron.runtime",
    "LostLockError": "leasecron.coordination",
    "RunResult": "leasecron.runtime",
    "Scheduler": "leasecron.runtime",
    "Tuning": "leasecron.runtime",
    # Coordination primitives, for code that needs a lock or an election of its own.
    "BackgroundLoop": "leasecron.coordination",
    "ConfigError": "leasecron.models.configs",
    "ElectionConfig": "leasecron.models.configs",
    "Elector": "leasecron.coordination",
    "Grant": "leasecron.coordination",
    "KeepAlive": "leasecron.coordination",
    "LockConfig": "leasecron.models.configs",
    "Skipped": "leasecron.coordination",
    "SyncElector": "leasecron.coordination",
    "SyncTickLock": "leasecron.coordination",
    "Term": "leasecron.coordination",
    "TickLock": "leasecron.coordination",
    "lease_informer": "leasecron.coordination",
    "make_identity": "leasecron.models.identity",
    "MetricsServer": "leasecron._metrics",
    "serve_metrics": "leasecron._metrics",
}

__all__ = [
    "BackgroundLoop",
    "Bucket",
    "ConfigError",
    "ElectionConfig",
    "Elector",
    "Grant",
    "JobContext",
    "KeepAlive",
    "LockConfig",
    "LostLockError",
    "MetricsServer",
    "RunResult",
    "Scheduler",
    "Skipped",
    "SyncElector",
    "SyncTickLock",
    "Term",
    "TickLock",
    "Tuning",
    "__version__",
    "lease_informer",
    "make_identity",
    "serve_metrics",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'leasecron' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
