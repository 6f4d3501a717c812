"""One OpenTelemetry span per handler run, when `opentelemetry-api` is installed (the `otel`
extra); nothing at all when it is not (the import is tried once, lazily).

The span is `leasecron.run <job>`, kind INTERNAL, from the tracer provider the application
set (`opentelemetry.trace.set_tracer_provider`; none set: the API's no-op). Attributes:
`leasecron.job`, `leasecron.namespace`, `leasecron.tick` (RFC 3339), `leasecron.token` (when
the run has one), `leasecron.holder`, `leasecron.bucket`, and `leasecron.outcome` once it
ended; any outcome but Succeeded/Unguarded sets status ERROR, and the handler's exception is
recorded on the span. The handler runs with the span as the current one, in its thread too,
so the spans it makes are children.

Its parent: a tick of a running Scheduler has none (a root span: a timer fired, no request
caused it). `Scheduler.run_once` (within `caller_parent()`) and callers that pass
`parent="caller"` (a guard around another scheduler's job) get the caller's current context.

Does not promise: a span for a run whose handler was never called (it could not start
before its starting deadline: that tick is a skip), or an ended span for a run whose task
was cancelled from outside before its outcome was known.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from leasecron._version import __version__
from leasecron.models.names import format_tick
from leasecron.models.specs import Outcome

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

Parent = Literal["caller", "root"]
_FOLLOW_CALLER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "leasecron_spans_follow_caller", default=False
)
_OK = (Outcome.SUCCEEDED, Outcome.UNGUARDED)


@functools.cache
def tracer() -> Tracer | None:
    """leasecron's tracer (a proxy that follows a provider set later), or None without the
    API installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer("leasecron", __version__)


def warm() -> None:
    """Import the API now, if installed (tens of milliseconds, once per process): at start-up,
    not on the start path of the first run."""
    tracer()


def _provided() -> bool:
    """Whether the application set a tracer provider: without one every span is a no-op, and
    a run does not make one (a few microseconds a run, on the start path)."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


@contextlib.contextmanager
def caller_parent() -> Iterator[None]:
    """Within this block (and the tasks and threads started from it), a run's span is a
    child of the context current where the handler is called, not a root."""
    reset = _FOLLOW_CALLER.set(True)
    try:
        yield
    finally:
        _FOLLOW_CALLER.reset(reset)


class RunSpan:
    """The span of one run: `start`, run the handler inside `current()`, `end` with the
    outcome. Every method is a no-op without OpenTelemetry."""

    def __init__(self, span: Span | None) -> None:
        self._span = span

    @classmethod
    def start(
        cls,
        *,
        job: str,
        namespace: str,
        tick: datetime,
        token: int | None,
        holder: str,
        bucket: str,
        parent: Parent | None = None,
    ) -> RunSpan:
        """Start the span of one run; `parent` None: the caller's context inside
        `caller_parent()`, else a root."""
        chosen = tracer()
        if chosen is None or not _provided():
            return cls(None)
        from opentelemetry import context, trace

        follow = _FOLLOW_CALLER.get() if parent is None else parent == "caller"
        attributes: dict[str, str | int] = {
            "leasecron.job": job,
            "leasecron.namespace": namespace,
            "leasecron.tick": format_tick(tick),
            "leasecron.holder": holder,
            "leasecron.bucket": str(bucket),
        }
        if token is not None:
            attributes["leasecron.token"] = token
        span = chosen.start_span(
            f"leasecron.run {job}",
            context=None if follow else context.Context(),
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        return cls(span)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make the span the current one (this thread or task) for the block."""
        if self._span is None:
            yield
            return
        from opentelemetry import trace

        with trace.use_span(
            self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield

    def end(
        self, *, outcome: Outcome, message: str = "", error: BaseException | None = None
    ) -> None:
        """Set the outcome (status ERROR unless the run succeeded, the exception recorded)
        and end the span."""
        span = self._span
        if span is None:
            return
        self._span = None
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("leasecron.outcome", outcome.value)
        if error is not None:
            span.record_exception(error)
        if outcome not in _OK:
            span.set_status(Status(StatusCode.ERROR, message or outcome.value))
        span.end()
