"""A replica with an APScheduler 3.x BackgroundScheduler whose interval job (1 s, counted
from this process's start) is guarded by `guarded(scheduler)`."""

from __future__ import annotations

from _effects import UNGUARDED, arguments, effect, guard_options, serve_until_stdin_closes
from apscheduler.schedulers.background import BackgroundScheduler

from leasecron.integrations.apscheduler import guarded

namespace, identity, effects = arguments()
scheduler = BackgroundScheduler(timezone="UTC")
if not UNGUARDED:
    guarded(scheduler, **guard_options(namespace, identity))
scheduler.add_job(effect(identity, effects), "interval", seconds=1, id="tick_effect")
scheduler.start()
serve_until_stdin_closes(lambda: scheduler.shutdown(wait=True))
