"""APScheduler 4.x (a pre-release: `pip install --pre 'APScheduler>=4.0.0a6'`) on every
replica, each schedule run by one replica per fire time.

    pip install leasecron
    pip install 'APScheduler==4.0.0a6'
    POD_NAME=$(hostname) python apscheduler4_app.py

`guard_job` reads the running job from `apscheduler.current_job`: the tick it claims is the
job's `scheduled_fire_time` and the guard's name is its schedule id (Lease
`leasecron-guard-send-reminders`). An interval trigger counts from each replica's start:
give the guard the same interval (`every=`) and the fire time is snapped onto it, or give
the trigger a fixed `start_time`. A cron trigger fires at the same instants everywhere.
"""

from __future__ import annotations

import logging

from apscheduler import Scheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from leasecron.integrations.apscheduler import guard_job
from leasecron.runtime import current_run

log = logging.getLogger("reminders")


@guard_job(every="1m", at_most_for="5m")
def send_reminders() -> int:
    run = current_run()
    log.info("sending the reminders of %s with fencing token %s", run.tick, run.token)
    return 0


@guard_job(at_most_for="1h")
def nightly_report() -> None:
    log.info("nightly report for %s", current_run().tick)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    with Scheduler() as scheduler:
        scheduler.add_schedule(send_reminders, IntervalTrigger(minutes=1), id="send-reminders")
        scheduler.add_schedule(nightly_report, CronTrigger(hour=2), id="nightly-report")
        scheduler.run_until_stopped()


if __name__ == "__main__":
    main()
