"""A Scheduler in a Django project: started once per serving process from `AppConfig.ready()`,
or run as its own process with `manage.py leasecron_scheduler`.

    # settings.py
    INSTALLED_APPS = [..., "leasecron.integrations.django_app"]
    LEASECRON_SCHEDULER = "billing.jobs.scheduler"   # dotted path to your Scheduler
    LEASECRON_AUTOSTART = True       # start it in each serving process (default True)
    LEASECRON_ONE_PER_POD = False    # True: one per pod under several workers (or a directory)

`ready()` runs in every process that sets Django up, and most of them must not schedule
anything: `manage.py migrate`, `shell`, `test`, `collectstatic`, and the watching parent of
`runserver`'s autoreloader (its child, `RUN_MAIN=true`, serves and runs the Scheduler).
`start_decision` says which process runs it: a WSGI/ASGI server process (gunicorn, uvicorn,
mod_wsgi) and `runserver`'s serving process; no other management command. Set
`LEASECRON_AUTOSTART = False` where the Scheduler runs as its own process instead (the
`leasecron_scheduler` command, in a sidecar container or its own Deployment) and under
pytest-django.

A started Scheduler runs in a background thread and stops when the process exits normally
(gunicorn's graceful worker exit on SIGTERM; `runserver` exits on SIGTERM too), releasing
its Leases. No signal handler is installed: the server keeps its own. The command is its own
process and so owns SIGTERM: it runs `Scheduler.run_forever()`. Does not promise anything for
a process killed by a signal it does not handle: its Leases expire.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from leasecron import _logs
from leasecron.integrations.workers import PodLock, run_in_background
from leasecron.runtime import Scheduler

SCHEDULER_SETTING = "LEASECRON_SCHEDULER"
AUTOSTART_SETTING = "LEASECRON_AUTOSTART"
ONE_PER_POD_SETTING = "LEASECRON_ONE_PER_POD"
_MANAGE = ("manage.py", "django-admin", "django-admin.py", "__main__.py")
_log = _logs.get_logger("leasecron.integrations.django")
_started: dict[int, Scheduler] = {}


def load_scheduler(path: str | None = None) -> Scheduler:
    """The Scheduler at dotted `path`, default `settings.LEASECRON_SCHEDULER`."""
    from django.conf import settings  # type: ignore[import-untyped]
    from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
    from django.utils.module_loading import import_string  # type: ignore[import-untyped]

    dotted = path or getattr(settings, SCHEDULER_SETTING, None)
    if not dotted:
        raise ImproperlyConfigured(
            f"set {SCHEDULER_SETTING} to the dotted path of your leasecron Scheduler"
        )
    found = import_string(dotted)
    if not isinstance(found, Scheduler):
        raise ImproperlyConfigured(f"{SCHEDULER_SETTING} {dotted!r} is not a leasecron Scheduler")
    return found


def start_decision(
    *, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """None when this process should run the Scheduler, else why not (a sentence)."""
    argv = sys.argv if argv is None else argv
    env = os.environ if environ is None else environ
    program = Path(argv[0]).name if argv else ""
    if program not in _MANAGE or (program == "__main__.py" and "django" not in argv[0]):
        return None  # a server process (gunicorn, uvicorn, mod_wsgi, ...) serves the app
    command = argv[1] if len(argv) > 1 else "help"
    if command != "runserver":
        return f"manage.py {command} does not run the scheduler"
    if "--noreload" in argv or env.get("RUN_MAIN") == "true":
        return None
    return "runserver's autoreloader process does not run the scheduler (its child does)"


def start(
    scheduler: Scheduler | None = None,
    *,
    pod_lock: PodLock | None = None,
    argv: Sequence[str] | None = None,
) -> bool:
    """Start `scheduler` (default: the one of `settings.LEASECRON_SCHEDULER`) in the
    background if `start_decision` says this process runs it and it is not started here yet;
    whether it was started now. Call it from `AppConfig.ready()`."""
    reason = start_decision(argv=argv)
    if reason is not None:
        _log.debug(reason)
        return False
    scheduler = scheduler or load_scheduler()
    if _started.get(os.getpid()) is scheduler:  # ready() can run twice
        return False
    _started[os.getpid()] = scheduler
    run_in_background(scheduler, pod_lock=pod_lock)
    return True


def ready() -> bool:
    """What the `leasecron.integrations.django_app` AppConfig does: `start()` as the
    settings say (`LEASECRON_AUTOSTART`, `LEASECRON_ONE_PER_POD`)."""
    from django.conf import settings

    if not getattr(settings, AUTOSTART_SETTING, True):
        return False
    if not getattr(settings, SCHEDULER_SETTING, None):
        _log.warning(f"{SCHEDULER_SETTING} is not set: no scheduler to start")
        return False
    reason = start_decision()
    if reason is not None:
        _log.debug(reason)
        return False
    scheduler = load_scheduler()
    return start(scheduler, pod_lock=pod_lock_from_settings(scheduler))


def pod_lock_from_settings(scheduler: Scheduler) -> PodLock | None:
    """`LEASECRON_ONE_PER_POD`: False (default) none; True the default lock; a path: the lock
    in that directory."""
    from django.conf import settings

    one_per_pod = getattr(settings, ONE_PER_POD_SETTING, False)
    if not one_per_pod:
        return None
    directory = None if one_per_pod is True else str(one_per_pod)
    return PodLock.for_scheduler(scheduler, directory=directory)
