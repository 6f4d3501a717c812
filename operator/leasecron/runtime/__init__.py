"""The in-pod scheduler: handler registry, tick dispatch per bucket, membership.

Public names: `Scheduler`, `JobContext`, `LostLockError`, `Tuning`, and `RunResult` /
`RunOutcome` (what `Scheduler.run_once` returns). Everything else in this
package is private (modules with a leading underscore) and may change.
"""

from leasecron.coordination import LostLockError
from leasecron.runtime._context import JobContext
from leasecron.runtime._oneshot import RunResult
from leasecron.runtime._records import RunOutcome
from leasecron.runtime._scheduler import Scheduler
from leasecron.runtime._services import Tuning

__all__ = ["JobContext", "LostLockError", "RunOutcome", "RunResult", "Scheduler", "Tuning"]
