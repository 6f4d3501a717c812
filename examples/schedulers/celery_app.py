"""Celery beat and a worker on every replica, each beat entry's task run once per tick.

    pip install leasecron celery
    POD_NAME=$(hostname) celery -A celery_app worker -B --pool threads -c 4

Every replica's beat sends a message per tick (N replicas, N messages); `guard_task` makes
the task body claim the tick first, so one of them runs it and the others return a skip.
Beat does not say which tick a message is for, so the guard is given the entry's schedule
(`every=` or `cron=` + `time_zone`, or `job=` a ScheduledJob); each message is stamped with
the moment it was sent, and the tick is the latest one at or before it. The task's result
is a dict: ran, reason, tick, token, holder, value.
"""

from __future__ import annotations

import logging

from celery import Celery
from celery.schedules import crontab

from leasecron.integrations.celery import guard_task
from leasecron.runtime import current_run

log = logging.getLogger("reminders")
app = Celery("billing", broker="redis://redis:6379/0")
app.conf.beat_schedule = {
    "send-reminders": {"task": "billing.send_reminders", "schedule": 60.0},
    "nightly-report": {"task": "billing.nightly_report", "schedule": crontab(hour=2, minute=0)},
}
app.conf.timezone = "Europe/Berlin"


@app.task(name="billing.send_reminders")
@guard_task(every="1m", at_most_for="5m")
def send_reminders() -> int:
    run = current_run()
    log.info("sending the reminders of %s with fencing token %s", run.tick, run.token)
    return 0


@app.task(name="billing.nightly_report")
@guard_task(cron="0 2 * * *", time_zone="Europe/Berlin", at_most_for="1h")
def nightly_report() -> None:
    log.info("nightly report for %s", current_run().tick)
