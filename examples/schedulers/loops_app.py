"""The `schedule` library, or a plain timer loop, on every replica, each tick run by one.

    pip install leasecron schedule
    POD_NAME=$(hostname) python loops_app.py

Neither kind of loop has ticks that replicas share (`schedule.every(1).minutes` counts from
each process's start, a `time.sleep` loop drifts), so the guard is given the schedule: with
`every="1m"` a call claims the latest whole minute (from the Unix epoch) at or before now,
and a second call within that minute finds it taken. `run_every` is a loop that wakes at each
tick and claims the tick it woke for.
"""

from __future__ import annotations

import logging
import threading
import time

import schedule

from leasecron.integrations.loops import guarded, run_every
from leasecron.runtime import current_run

log = logging.getLogger("reminders")


def send_reminders() -> int:
    run = current_run()
    log.info("sending the reminders of %s with fencing token %s", run.tick, run.token)
    return 0


def refresh_index() -> None:
    log.info("refreshing the search index for %s", current_run().tick)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    # The schedule library: the guarded function in place of the plain one.
    schedule.every(1).minutes.do(guarded(send_reminders, name="send-reminders", every="1m"))
    # A loop of leasecron's own, woken at each tick of the cron expression.
    stop = threading.Event()
    threading.Thread(
        target=run_every,
        kwargs={"body": refresh_index, "name": "refresh-index", "cron": "*/5 * * * *"},
        daemon=True,
    ).start()
    while not stop.is_set():
        schedule.run_pending()
        time.sleep(1)


if __name__ == "__main__":
    main()
