"""leasecron: scheduled jobs for many-replica Python apps on Kubernetes.

What an application uses is re-exported here and only here. Either leasecron runs the
schedule (a ScheduledJob declares it, a Scheduler runs the handler):

    import leasecron

    scheduler = leasecron.Scheduler("billing-api")

    @scheduler.job("nightly_report")
    def nightly_report(ctx: leasecron.JobContext) -> None:
        ctx.logger.info("running", token=ctx.token)

    scheduler.run_forever()

or the application's own scheduler does (APScheduler, Celery beat, a loop) and a guard decides
which replica runs each tick:

    @leasecron.guard("send-reminders", every="1m")
    def send_reminders() -> None: ...

The coordination primitives (locks, elections, the Lease view) live in
`leasecron.coordination`, the integrations with schedulers and frameworks in
`leasecron.integrations`, test helpers in `leasecron.testing`. The primitives were once
re-exported here too; those names still resolve, with a DeprecationWarning that names their
home.

Names are imported on first use, so `import leasecron` stays cheap for tools (the CLI, the
pytest plugin) that need none of them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from leasecron._version import __version__

if TYPE_CHECKING:
    from leasecron._metrics import MetricsServer, serve_metrics
    from leasecron.coordination import LostLockError
    from leasecron.models.configs import ConfigError
    from leasecron.models.specs import Bucket
    from leasecron.runtime import (
        Guard,
        GuardConfigError,
        GuardResult,
        GuardRun,
        JobContext,
        RunEvent,
        RunEventKind,
        RunHook,
        RunOutcome,
        RunResult,
        Scheduler,
        Tuning,
        aclose_guards,
        close_guards,
        current_run,
        guard,
    )

_RUNTIME = (
    "Guard",
    "GuardConfigError",
    "GuardResult",
    "GuardRun",
    "JobContext",
    "RunEvent",
    "RunEventKind",
    "RunHook",
    "RunOutcome",
    "RunResult",
    "Scheduler",
    "Tuning",
    "aclose_guards",
    "close_guards",
    "current_run",
    "guard",
)
_EXPORTS = {
    **dict.fromkeys(_RUNTIME, "leasecron.runtime"),
    "Bucket": "leasecron.models.specs",
    "ConfigError": "leasecron.models.configs",
    "LostLockError": "leasecron.coordination",
    "MetricsServer": "leasecron._metrics",
    "serve_metrics": "leasecron._metrics",
}

_MOVED = {
    name: "leasecron.coordination"
    for name in (
        "BackgroundLoop",
        "ElectionConfig",
        "Elector",
        "Grant",
        "KeepAlive",
        "LockConfig",
        "Skipped",
        "SyncElector",
        "SyncTickLock",
        "Term",
        "TickLock",
        "lease_informer",
        "make_identity",
    )
}
"""Names once exported here that moved under their module: still resolved, with a warning."""

__all__ = [
    "Bucket",
    "ConfigError",
    "Guard",
    "GuardConfigError",
    "GuardResult",
    "GuardRun",
    "JobContext",
    "LostLockError",
    "MetricsServer",
    "RunEvent",
    "RunEventKind",
    "RunHook",
    "RunOutcome",
    "RunResult",
    "Scheduler",
    "Tuning",
    "__version__",
    "aclose_guards",
    "close_guards",
    "current_run",
    "guard",
    "serve_metrics",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        moved = _MOVED.get(name)
        if moved is None:
            raise AttributeError(f"module 'leasecron' has no attribute {name!r}")
        warnings.warn(
            f"leasecron.{name} moved: import it from {moved} (from {moved} import {name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
