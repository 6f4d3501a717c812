"""The scheduled jobs of the example web applications: one Scheduler and its handlers, the
same whichever framework serves the app (fastapi_app.py, flask_app.py, the Django project).

The ScheduledJobs they run (apply them with kubectl; `group` must match):

    send-invoices  once-per-tick  @every 1s   one line per tick in $INVOICES_FILE, one replica
    queue-poller   single-owner               one replica owns the queue until it stops

Environment: POD_NAME and POD_NAMESPACE from the downward API (identity, namespace),
LEASECRON_GROUP (default "web"), INVOICES_FILE (the stand-in for your database), and
LEASECRON_ONE_PER_POD=1 to run one Scheduler per pod when the server runs several workers
(the lock file goes to $LEASECRON_LOCK_DIR, an emptyDir, default the temporary directory).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

from leasecron import JobContext, Scheduler
from leasecron.integrations.workers import PodLock

# Embedded in a server, leasecron logs through the standard library's logging, like any
# library: this shows its INFO lines (a scheduler started, a pod lock taken) and up.
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")

scheduler = Scheduler(os.environ.get("LEASECRON_GROUP", "web"), grace_period=10.0)
"""Made at import, in each worker: every worker process gets its own identity."""

POD_LOCK = PodLock.for_scheduler(scheduler) if os.environ.get("LEASECRON_ONE_PER_POD") else None
INVOICES = Path(os.environ.get("INVOICES_FILE", "/tmp/invoices.txt"))
_writing = threading.Lock()


@scheduler.job("send-invoices")
def send_invoices(ctx: JobContext) -> None:
    """once-per-tick: one replica per tick writes the tick's line (your INSERT, keyed by
    ctx.idempotency_key and carrying ctx.token, in a real application)."""
    ctx.assert_held()
    with _writing, INVOICES.open("a") as out:
        out.write(f"{ctx.tick:%Y-%m-%dT%H:%M:%SZ} {ctx.holder} {ctx.token}\n")


@scheduler.job("queue-poller")
def queue_poller(ctx: JobContext) -> None:
    """single-owner: poll until this replica loses the Lease or the app shuts down."""
    while not ctx.wait_lost(0.5):
        pass  # take the next batch from the queue here


def status() -> dict[str, Any]:
    """What this worker's scheduler is doing, for a /leasecron endpoint."""
    handler = signal.getsignal(signal.SIGTERM)
    owner = getattr(handler, "__module__", None)
    name = getattr(handler, "__qualname__", None)
    return {
        "pid": os.getpid(),
        "identity": scheduler.identity,
        "running": scheduler.running,
        "jobs": list(scheduler.jobs),
        "sigterm": f"{owner}.{name}" if owner else str(handler),
    }
