"""Celery: a guarded task's message carries the moment it was sent (the tick it claims comes
from that moment, not from when a worker gets to it); other tasks' messages are left as they
are. Real Celery and kombu, the in-memory broker of this process."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from leasecron.integrations import _firing
from leasecron.integrations.celery import SENT_AT_HEADER, _sent, guard_task


@pytest.fixture
def app() -> Iterator[Celery]:
    made = Celery("sent-at", broker="memory://", set_as_current=True)
    made.conf.task_ignore_result = True
    yield made
    made.close()


def sent_headers(app: Celery, task: Any) -> dict[str, Any]:
    task.apply_async()
    with app.connection_for_read() as connection:
        queue = connection.SimpleQueue("celery")
        message = queue.get(timeout=5)
        message.ack()
        queue.close()
    return dict(message.headers)


def test_a_guarded_tasks_message_is_stamped_with_its_send_time(app: Celery) -> None:
    @app.task(name="report")
    @guard_task(every="1m", namespace="default")
    def report() -> None: ...

    before = datetime.now(UTC)
    headers = sent_headers(app, report)
    assert before <= datetime.fromisoformat(headers[SENT_AT_HEADER]) <= datetime.now(UTC)


def test_another_tasks_message_is_not_stamped(app: Celery) -> None:
    guard_task(every="1m")  # the receiver is connected

    @app.task(name="plain")
    def plain() -> None: ...

    assert SENT_AT_HEADER not in sent_headers(app, plain)


def test_the_task_run_claims_the_tick_of_its_send_time(app: Celery) -> None:
    @app.task(name="where", bind=True)
    def where(self: Any) -> _firing.Firing | None:
        return _sent()

    sent = datetime(2026, 3, 1, 12, 0, 7, tzinfo=UTC)
    found = where.apply(headers={SENT_AT_HEADER: sent.isoformat()}).get()
    assert found == _firing.Firing(at=sent, job_id="where")


def test_a_guarded_task_needs_the_beat_entrys_schedule() -> None:
    with pytest.raises(ValueError, match="every="):
        guard_task(namespace="default")
