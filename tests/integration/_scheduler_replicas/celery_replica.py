"""A replica that runs its own Celery beat (a thread, 1 s interval entry counted from this
process's start) and its own worker (solo pool) on its own broker (kombu's `memory://`, in
this process): three replicas, three beats, three messages per tick and three workers that
run them, the task guarded by `guard_task(every="1s")`. (kombu's `filesystem://` broker
cannot be shared by processes: a consumer may read a message file before the producer has
written it.)"""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import datetime

from _effects import UNGUARDED, arguments, effect, guard_options, say
from celery import Celery, current_task, signals
from celery.beat import EmbeddedService

from leasecron.integrations.celery import SENT_AT_HEADER, guard_task
from leasecron.runtime import current_run

namespace, identity, effects = arguments()
app = Celery("replica", broker="memory://")
app.conf.update(
    broker_transport_options={"polling_interval": 0.05},
    beat_schedule={"tick-effect": {"task": "tick_effect", "schedule": 1.0}},
    beat_max_loop_interval=1,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    worker_redirect_stdouts=False,
)
body = effect(identity, effects)


def tick_effect() -> str:
    if not UNGUARDED:  # the tick claimed is the one the message was sent in
        sent = datetime.fromisoformat(getattr(current_task.request, SENT_AT_HEADER))
        claimed = current_run().tick
        assert claimed == sent.replace(microsecond=0), f"claimed {claimed}, sent {sent}"
    return body()


task = (
    tick_effect
    if UNGUARDED
    else guard_task(every="1s", **guard_options(namespace, identity))(tick_effect)
)
app.task(name="tick_effect")(task)


def stop_on_stdin_close() -> None:
    sys.stdin.read()
    os.kill(os.getpid(), signal.SIGTERM)


@signals.worker_ready.connect
def started(**_: object) -> None:
    beat = EmbeddedService(app, thread=True, scheduler_cls="celery.beat:Scheduler")
    beat.start()
    threading.Thread(target=stop_on_stdin_close, daemon=True).start()
    say("ready")


app.Worker(
    pool="solo",
    concurrency=1,
    without_mingle=True,
    without_gossip=True,
    without_heartbeat=True,
    loglevel="WARNING",
    quiet=True,
).start()
