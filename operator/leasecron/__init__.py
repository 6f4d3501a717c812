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
    from leasecron.coordination import LostLockError
    from leasecron.models.specs import Bucket
    from leasecron.runtime import JobContext, Scheduler, Tuning

_EXPORTS = {
    "Bucket": "leasecron.models.specs",
    "JobContext": "leasecron.runtime",
    "LostLockError": "leasecron.coordination",
    "Scheduler": "leasecron.runtime",
    "Tuning": "leasecron.runtime",
}

__all__ = ["Bucket", "JobContext", "LostLockError", "Scheduler", "Tuning", "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'leasecron' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
