"""APScheduler 3.x on every replica, each job run by one replica per fire time.

    pip install leasecron 'APScheduler>=3.10,<4'
    POD_NAME=$(hostname) python apscheduler3_app.py

`guarded(scheduler)` wraps the scheduler's executors before it starts: every job then claims
its scheduled run time on the Lease `leasecron-guard-<job id>` and runs on the replica that
got it; the others skip (`result.reason` is `taken`, `live_grant`, ...). Give every job an
`id=`, the same on every replica. A run past the job's `misfire_grace_time` is skipped with
reason `deadline`. An interval trigger's run times are snapped to its interval from the Unix
epoch, so replicas started at different moments agree on the tick.
"""

from __future__ import annotations

import logging
import signal
import threading

from apscheduler.schedulers.background import BackgroundScheduler

from leasecron.integrations.apscheduler import guard_job, guarded
from leasecron.runtime import close_guards, current_run

log = logging.getLogger("reminders")


def send_reminders() -> int:
    run = current_run()  # this replica holds the tick: token, tick, assert_held()
    log.info("sending the reminders of %s with fencing token %s", run.tick, run.token)
    run.assert_held()  # before a write that must not happen twice
    return 0


@guard_job(at_most_for="1h")  # this job's options, over those given to guarded()
def nightly_report() -> None:
    log.info("nightly report for %s", current_run().tick)


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    scheduler = guarded(BackgroundScheduler(timezone="UTC"), at_most_for="5m")
    scheduler.add_job(send_reminders, "interval", minutes=1, id="send-reminders")
    scheduler.add_job(nightly_report, "cron", hour=2, id="nightly-report")
    scheduler.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    scheduler.shutdown()  # let running jobs finish, then
    close_guards()  # release their grants at once


if __name__ == "__main__":
    main()
