"""The in-pod scheduler: handler registry, tick dispatch per bucket, membership.

Public names: `Scheduler`, `JobContext`, `LostLockError`, `Tuning`, and `RunResult` /
`RunOutcome` (what `Scheduler.run_once` returns), and `RunEvent` / `RunEventKind` / `RunHook`
(run hooks: `Scheduler(hooks=...)`, `@scheduler.on_failure`); for functions that another
scheduler fires, `guard` / `Guard` (one body per tick across replicas), `GuardRun`,
`GuardResult`, `GuardConfigError`, `current_run`, `close_guards` and `aclose_guards`.
Everything else in this package is private (modules with a leading underscore) and may change.
"""

from leasecron.coordination import LostLockError
from leasecron.runtime._context import JobContext
from leasecron.runtime._guard_runs import GuardResult, GuardRun, current_run
from leasecron.runtime._guard_runtime import aclose_guards, close_guards
from leasecron.runtime._guard_settings import GuardConfigError
from leasecron.runtime._guards import Guard, guard
from leasecron.runtime._hooks import RunEvent, RunEventKind, RunHook
from leasecron.runtime._oneshot import RunResult
from leasecron.runtime._records import RunOutcome
from leasecron.runtime._scheduler import Scheduler
from leasecron.runtime._services import Tuning

__all__ = [
    "Guard",
    "GuardConfigError",
    "GuardResult",
    "GuardRun",
    "JobContext",
    "LostLockError",
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
]
