"""The OpenTelemetry span of a run, with the real SDK and an in-memory exporter: its name,
attributes and status, the handler's own spans as its children (in the handler's thread
too), its parent, and nothing at all without opentelemetry installed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from leasecron.models.clocks import FakeClock
from leasecron.models.specs import Bucket, Outcome
from leasecron.runtime import _tracing
from leasecron.runtime._context import JobContext
from leasecron.runtime._invoke import HandlerRun
from leasecron.runtime._observe import RunObserver
from leasecron.runtime._registry import Handler, HandlerRegistry
from leasecron.runtime._tracing import RunSpan, caller_parent

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def run(fn: Handler, *, token: int | None = 7, outcome: Outcome | None = None) -> None:
    """Run `fn` once as the runtime does, observed, and end it with `outcome` (default:
    Failed when it raised, else Succeeded)."""
    handler = HandlerRegistry().register("h", fn)
    ctx = JobContext(
        job="report",
        namespace="ns",
        tick=TICK,
        holder="me",
        bucket=Bucket.ONCE_PER_TICK,
        token=token,
    )
    observer = RunObserver()
    pool = ThreadPoolExecutor(1)

    async def main() -> None:
        call = HandlerRun(
            handler, ctx, executor=pool, clock=FakeClock(start=TICK), on_call=observer.calling(ctx)
        )
        call.start()
        end = await call.wait()
        assert end is not None
        chosen = outcome or (Outcome.FAILED if end.error else Outcome.SUCCEEDED)
        message = "RuntimeError: disk full" if end.error else ""
        observer.ended(ctx, end, chosen, message)

    try:
        asyncio.run(main())
    finally:
        pool.shutdown(wait=True)


def only_run_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("leasecron.run")]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.parametrize("is_async", [False, True])
def test_a_run_is_one_internal_span_with_the_runs_attributes(
    spans: InMemorySpanExporter, is_async: bool
) -> None:
    async def async_handler(ctx: JobContext) -> None:
        pass

    run(async_handler if is_async else (lambda ctx: None))
    span = only_run_span(spans)
    assert span.name == "leasecron.run report" and span.kind is SpanKind.INTERNAL
    assert dict(span.attributes or {}) == {
        "leasecron.job": "report",
        "leasecron.namespace": "ns",
        "leasecron.tick": "2026-03-01T02:00:00Z",
        "leasecron.token": 7,
        "leasecron.holder": "me",
        "leasecron.bucket": "once-per-tick",
        "leasecron.outcome": "Succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_run_without_a_token_has_no_token_attribute(spans: InMemorySpanExporter) -> None:
    run(lambda ctx: None, token=None)
    assert "leasecron.token" not in (only_run_span(spans).attributes or {})


def test_a_failed_run_has_status_error_and_the_exception_recorded(
    spans: InMemorySpanExporter,
) -> None:
    def handler(ctx: JobContext) -> None:
        raise RuntimeError("disk full")

    run(handler)
    span = only_run_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "RuntimeError: disk full"
    assert (span.attributes or {})["leasecron.outcome"] == "Failed"
    [recorded] = [e for e in span.events if e.name == "exception"]
    assert (recorded.attributes or {})["exception.type"] == "RuntimeError"


def test_a_run_that_lost_its_grant_without_raising_is_an_error_too(
    spans: InMemorySpanExporter,
) -> None:
    run(lambda ctx: None, outcome=Outcome.LOST_LOCK)
    span = only_run_span(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert not [e for e in span.events if e.name == "exception"]


@pytest.mark.parametrize("is_async", [False, True])
def test_spans_the_handler_makes_are_children_of_the_run_span_in_its_thread_too(
    spans: InMemorySpanExporter, is_async: bool
) -> None:
    def work(ctx: JobContext) -> None:
        with trace.get_tracer("app").start_as_current_span("write invoices"):
            pass

    async def async_work(ctx: JobContext) -> None:
        work(ctx)

    run(async_work if is_async else work)
    [child] = [s for s in spans.get_finished_spans() if s.name == "write invoices"]
    parent = only_run_span(spans)
    assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert child.context.trace_id == parent.context.trace_id


def test_a_tick_is_a_root_span_even_inside_an_application_span(
    spans: InMemorySpanExporter,
) -> None:
    with trace.get_tracer("app").start_as_current_span("app startup"):
        run(lambda ctx: None)
    assert only_run_span(spans).parent is None


def test_within_caller_parent_the_run_span_is_a_child_of_the_callers_span(
    spans: InMemorySpanExporter,
) -> None:
    app = trace.get_tracer("app")
    with app.start_as_current_span("manual trigger") as outer, caller_parent():
        run(lambda ctx: None)
    parent = only_run_span(spans).parent
    assert parent is not None and parent.span_id == outer.get_span_context().span_id


def test_a_guard_can_ask_for_the_callers_context_explicitly(spans: InMemorySpanExporter) -> None:
    with trace.get_tracer("app").start_as_current_span("apscheduler job") as outer:
        span = RunSpan.start(
            job="sync",
            namespace="ns",
            tick=TICK,
            token=None,
            holder="me",
            bucket="once-per-tick",
            parent="caller",
        )
        span.end(outcome=Outcome.SUCCEEDED)
    parent = only_run_span(spans).parent
    assert parent is not None and parent.span_id == outer.get_span_context().span_id


@pytest.fixture
def without_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import raises ImportError
    _tracing.tracer.cache_clear()
    yield
    _tracing.tracer.cache_clear()


@pytest.mark.usefixtures("without_opentelemetry")
def test_without_opentelemetry_a_run_goes_as_before_and_no_span_is_made() -> None:
    seen: list[str] = []
    run(lambda ctx: seen.append(ctx.job))
    assert seen == ["report"]
    assert _tracing.tracer() is None


def test_without_a_tracer_provider_a_run_makes_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the application sets a provider every span is a no-op: the start path of each
    run does not make one."""
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    span = RunSpan.start(
        job="report", namespace="ns", tick=TICK, token=1, holder="me", bucket="once-per-tick"
    )
    assert span._span is None
