"""A replica with an APScheduler 4.x Scheduler (run by the side environment the test
builds) whose interval schedule (1 s, counted from this process's start) runs a function
decorated with `guard_job(every="1s")`: the tick is the job's scheduled fire time
(`apscheduler.current_job`), snapped onto the 1 s grid."""

from __future__ import annotations

from _effects import UNGUARDED, arguments, effect, guard_options, serve_until_stdin_closes
from apscheduler import Scheduler
from apscheduler.triggers.interval import IntervalTrigger

from leasecron.integrations.apscheduler import guard_job

namespace, identity, effects = arguments()
body = effect(identity, effects)


def tick_effect() -> str:
    return body()


if not UNGUARDED:
    tick_effect = guard_job(every="1s", **guard_options(namespace, identity))(tick_effect)

scheduler = Scheduler()
scheduler.__enter__()
scheduler.add_schedule(tick_effect, IntervalTrigger(seconds=1), id="tick_effect")
scheduler.start_in_background()
serve_until_stdin_closes(lambda: scheduler.__exit__(None, None, None))
