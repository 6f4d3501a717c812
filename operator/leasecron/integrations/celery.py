"""Guard Celery tasks that beat sends on every replica, so that each tick runs once.

When every replica runs its own beat (and worker), N beats send N messages per tick. With the
task body guarded, the worker that takes a message first claims the tick; the others find it
taken and skip. Celery beat sets no header that says which tick a message is for, and an
interval `schedule` counts from each beat's own start, so the guard is given the schedule
(`every=` / `cron=` + `time_zone`, or `job=` a ScheduledJob) and the tick is the latest tick
of it at or before the moment the message was *sent*: a `before_task_publish` receiver stamps
each message of a guarded task with its send time (header `leasecron_sent_at`), so a message
that waited in the queue still claims the tick it was sent for, and one that waited past the
guard's `starting_deadline` is skipped (`deadline`). A message without the header (sent by a
process that does not import this module) claims the tick current when it runs.

    @app.task(name="billing.send_reminders")
    @guard_task(every="1m")          # or cron="0 2 * * *", time_zone="Europe/Berlin"
    def send_reminders() -> int: ...

The task's result is the guard's result as a dict (`ran`, `reason`, `tick`, `token`,
`holder`, `value`), so that any result backend can store it. The guard is named after the
task name (`billing.send_reminders` -> Lease `leasecron-guard-billing.send-reminders`) unless
`name=` is given. The guard's grants are released when a worker process shuts down. Each
worker process has its own guard runtime (one Lease cache per namespace): prefer the solo or
threads pool, or few prefork processes.

Does not deduplicate the messages themselves (every beat still sends one per tick).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import celery  # type: ignore[import-untyped]
from celery import signals

from leasecron.integrations import _firing
from leasecron.runtime import GuardResult, close_guards

SENT_AT_HEADER = "leasecron_sent_at"
MARK = "__leasecron_guard__"
_TICK_SOURCES = {"every", "cron", "job"}


def guard_task(
    name: str | None = None, **guard_options: Any
) -> Callable[[Callable[..., Any]], Any]:
    """Decorate a task function (under `@app.task`) so that each tick runs on one replica.

    `guard_options`: those of `leasecron.runtime.Guard`; one of `every`, `cron` or `job` is
    required (which ticks the beat entry fires)."""
    if not _TICK_SOURCES & guard_options.keys():
        raise ValueError(
            "guard_task needs the beat entry's schedule: every= (e.g. '1m'), cron= (e.g. "
            "'0 2 * * *', with time_zone=) or job= (a ScheduledJob's name)"
        )
    _connect_signals()

    def decorate(func: Callable[..., Any]) -> Any:
        if _firing.is_async(func):
            raise TypeError(f"{func.__name__}: Celery runs task functions synchronously")
        guarded = _firing.guard_callable(func, name=name, options=guard_options, find=_sent)

        @functools.wraps(func)
        def task_body(*args: Any, **kwargs: Any) -> dict[str, Any]:
            return as_result(guarded(*args, **kwargs))

        setattr(task_body, MARK, guard_options)
        return task_body

    return decorate


def as_result(result: GuardResult[Any]) -> dict[str, Any]:
    """A guard result as a task result any result backend can store."""
    return {
        "ran": result.ran,
        "reason": result.reason,
        "tick": result.tick.isoformat(),
        "token": result.token,
        "holder": result.holder,
        "value": result.value,
    }


def _sent() -> _firing.Firing | None:
    """The message being run: when it was sent, and its task's name. A worker puts message
    headers on the request; an eager `apply(headers=...)` keeps them in `request.headers`."""
    task = celery.current_task
    if not task:
        return None
    request = task.request
    sent = getattr(request, SENT_AT_HEADER, None)
    if sent is None:
        sent = (getattr(request, "headers", None) or {}).get(SENT_AT_HEADER)
    if not isinstance(sent, str):
        return None
    try:
        at = datetime.fromisoformat(sent)
    except ValueError:
        return None
    return _firing.Firing(at=at, job_id=task.name)


def _is_guarded(task_name: str) -> bool:
    task = celery.current_app.tasks.get(task_name)
    return task is not None and hasattr(getattr(task, "run", None), MARK)


def _stamp_sent_at(
    sender: str | None = None, headers: dict[str, Any] | None = None, **_: Any
) -> None:
    """`before_task_publish`: stamp a guarded task's message with the time it is sent."""
    if headers is None or sender is None or not _is_guarded(sender):
        return
    headers.setdefault(SENT_AT_HEADER, datetime.now(UTC).isoformat())


def _release_guards(**_: Any) -> None:
    """A worker process that ends releases its grants at once."""
    close_guards()


def _connect_signals() -> None:
    signals.before_task_publish.connect(
        _stamp_sent_at, weak=False, dispatch_uid="leasecron-guard-sent-at"
    )
    signals.worker_process_shutdown.connect(
        _release_guards, weak=False, dispatch_uid="leasecron-guard-release"
    )
    signals.worker_shutdown.connect(
        _release_guards, weak=False, dispatch_uid="leasecron-guard-release-worker"
    )
