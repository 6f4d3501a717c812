"""What a guard's runs tell the application, with the real OpenTelemetry SDK: a run's span
starts under the caller's current span with the run's attributes (the job of a job= guard,
else the guard's name), the body's spans are its children, it ends with the outcome and the
body's exception; the hooks hear started, succeeded/failed and skipped (with the reason and
this replica's identity)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from leasecron.coordination import Grant, ReleaseResult
from leasecron.models.clocks import FakeClock
from leasecron.models.specs import Bucket, Outcome
from leasecron.runtime import RunEvent, RunEventKind
from leasecron.runtime._guard_runs import GuardRun
from leasecron.runtime._hooks import RunHooks
from leasecron.runtime._observe import observe_end, observe_skip, observe_start

TICK = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class NoOwner:
    async def renew(self, grant: Grant) -> bool:
        return False

    async def release(self, grant: Grant) -> ReleaseResult:
        return ReleaseResult.FREED


class Heard:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self._lock = threading.Lock()

    def __call__(self, event: RunEvent) -> None:
        with self._lock:
            self.events.append(event)


def held_run(*, job: str | None = None) -> GuardRun:
    clock = FakeClock(start=TICK)
    grant = Grant(
        owner=NoOwner(),  # type: ignore[arg-type]
        namespace="ns",
        name="leasecron-guard-g",
        token=7,
        tick=TICK,
        holder="replica-1",
        acquired_at=clock.monotonic(),
        expires_at=clock.monotonic() + 10,
        clock=clock,
    )
    return GuardRun(guard="g", namespace="ns", tick=TICK, grant=grant, job=job)


def started(hooks: RunHooks, run: GuardRun) -> None:
    """As a guard's front end starts a held run's body."""
    run.span = observe_start(hooks, run.event(), parent="caller")


def ended(hooks: RunHooks, run: GuardRun, **outcome: Any) -> None:
    """As a guard's engine ends it."""
    observe_end(hooks, run.event(), run.span, **outcome)


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


def test_a_run_is_a_span_under_the_callers_span_and_the_bodys_spans_are_its_children(
    spans: InMemorySpanExporter,
) -> None:
    hooks, heard = RunHooks(), Heard()
    hooks.add(heard)
    run = held_run()
    app = trace.get_tracer("app")
    with app.start_as_current_span("scheduler job") as outer:
        started(hooks, run)
        with run.span.current():
            app.start_span("body work").end()
        ended(hooks, run, outcome=Outcome.SUCCEEDED, message="", error=None, duration=0.5)
    assert hooks.flush(timeout=5)
    span = named(spans, "leasecron.run g")
    assert span.parent is not None and span.parent.span_id == outer.get_span_context().span_id
    assert dict(span.attributes or {}) == {
        "leasecron.job": "g",
        "leasecron.namespace": "ns",
        "leasecron.tick": "2026-01-01T12:00:00Z",
        "leasecron.token": 7,
        "leasecron.holder": "replica-1",
        "leasecron.bucket": "once-per-tick",
        "leasecron.outcome": "Succeeded",
    }
    child = named(spans, "body work")
    assert child.parent is not None and child.parent.span_id == span.context.span_id
    assert [e.kind for e in heard.events] == [RunEventKind.STARTED, RunEventKind.SUCCEEDED]
    first, last = heard.events
    assert (first.job, first.tick, first.token, first.holder) == ("g", TICK, 7, "replica-1")
    assert first.bucket is Bucket.ONCE_PER_TICK
    assert (last.outcome, last.duration, last.error) == (Outcome.SUCCEEDED, 0.5, None)


def test_a_failed_body_ends_its_span_in_error_and_the_hooks_hear_its_exception(
    spans: InMemorySpanExporter,
) -> None:
    hooks, heard = RunHooks(), Heard()
    hooks.add(heard, kinds=[RunEventKind.FAILED])
    run = held_run(job="nightly-report")
    error = ValueError("bad row")
    started(hooks, run)
    ended(
        hooks, run, outcome=Outcome.FAILED, message="ValueError: bad row", error=error, duration=1
    )
    assert hooks.flush(timeout=5)
    span = named(spans, "leasecron.run nightly-report")
    assert (span.attributes or {})["leasecron.job"] == "nightly-report"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: bad row"
    assert [e.name for e in span.events] == ["exception"]
    [failed] = heard.events
    assert (failed.kind, failed.job, failed.error) == (RunEventKind.FAILED, "nightly-report", error)
    assert failed.outcome is Outcome.FAILED and failed.message == "ValueError: bad row"


def test_a_skip_tells_the_reason_and_this_replicas_identity_and_makes_no_span(
    spans: InMemorySpanExporter,
) -> None:
    hooks, heard = RunHooks(), Heard()
    hooks.add(heard)
    run = GuardRun(guard="g", namespace="ns", tick=TICK, reason="taken", holder="replica-1")
    observe_skip(hooks, run.event(skipped_by="replica-2"))
    assert hooks.flush(timeout=5)
    [event] = heard.events
    assert (event.kind, event.reason, event.holder) == (RunEventKind.SKIPPED, "taken", "replica-2")
    assert (event.job, event.tick, event.token) == ("g", TICK, None)
    assert not spans.get_finished_spans()
