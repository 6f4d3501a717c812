"""A Scheduler in a Flask application's process, as a Flask extension.

    from flask import Flask
    from leasecron.integrations import flask as leasecron_flask

    app = Flask(__name__)
    leasecron_flask.init_app(app, scheduler)          # or LeasecronExtension(app, scheduler)

Flask has no startup or shutdown hook of its own under a WSGI server, so `init_app` starts
the Scheduler in a background thread of the process that calls it and stops it when that
process exits normally: a gunicorn worker's graceful exit on SIGTERM (running handlers finish
or are stopped within the grace period, Leases released). No signal handler is installed; the
server keeps its own. Call `init_app` where each worker makes its app (an app factory, or a
module gunicorn imports in the worker: not with `--preload`, where the master would run it).

Skipped in the parent process of the development server's reloader (`flask run --debug`
loads the app twice; the child that serves runs the Scheduler). Flask's development server
does not handle SIGTERM: a process stopped that way releases nothing and its Leases expire.
Use gunicorn in a pod. With several workers, `pod_lock=PodLock.for_scheduler(scheduler)` runs
one Scheduler per pod (`leasecron.integrations.workers`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from leasecron import _logs
from leasecron.integrations.workers import PodLock, run_in_background
from leasecron.runtime import Scheduler

EXTENSION = "leasecron"
"""The key of the scheduler in `app.extensions`."""
_log = _logs.get_logger("leasecron.integrations.flask")


def init_app(
    app: Any, scheduler: Scheduler, *, pod_lock: PodLock | None = None, start: bool = True
) -> Scheduler:
    """Register `scheduler` as `app.extensions["leasecron"]` and, with `start` (unless this
    is the reloader's parent process), start it in the background until the process exits."""
    app.extensions[EXTENSION] = scheduler
    if not start:
        return scheduler
    if in_reloader_parent():
        _log.info("the development server's reloader process does not run the scheduler")
        return scheduler
    run_in_background(scheduler, pod_lock=pod_lock)
    return scheduler


def scheduler_of(app: Any) -> Scheduler:
    """The scheduler `init_app` registered on `app`; KeyError when there is none."""
    found: Scheduler = app.extensions[EXTENSION]
    return found


def in_reloader_parent(
    *, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether this is the watching parent of `flask run`'s reloader (which loads the app
    but serves nothing): run from the CLI, the reloader on, not its serving child."""
    argv = sys.argv if argv is None else argv
    env = os.environ if environ is None else environ
    if env.get("FLASK_RUN_FROM_CLI") != "true" or env.get("WERKZEUG_RUN_MAIN") == "true":
        return False
    if "--no-reload" in argv:
        return False
    debug = env.get("FLASK_DEBUG", "").lower() not in ("", "0", "false", "no")
    return "--reload" in argv or debug


class LeasecronExtension:
    """The extension-object form: `LeasecronExtension(app, scheduler)`, or
    `ext = LeasecronExtension(scheduler=scheduler)` then `ext.init_app(app)` in a factory."""

    def __init__(
        self,
        app: Any = None,
        scheduler: Scheduler | None = None,
        *,
        pod_lock: PodLock | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.pod_lock = pod_lock
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Any) -> Scheduler:
        if self.scheduler is None:
            raise ValueError("LeasecronExtension needs a scheduler before init_app")
        return init_app(app, self.scheduler, pod_lock=self.pod_lock)
