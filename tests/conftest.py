"""Shared test configuration. The cluster fixtures (`controlplane`, `kube_api`, `namespace`,
`serviceaccount_client`, ...) come from the `leasecron.testing.pytest_plugin` plugin, enabled
by `-p leasecron.testing.pytest_plugin` in pyproject.toml's addopts; see its module docstring.
Keep this file small."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_SPANS = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans exported by the global tracer provider: the OpenTelemetry SDK's, installed
    once per test process with one in-memory exporter; emptied before and after the test."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_leasecron_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_SPANS))
        provider._leasecron_test_exporter = True  # type: ignore[attr-defined]
    _SPANS.clear()
    yield _SPANS
    _SPANS.clear()
