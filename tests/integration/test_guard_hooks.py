"""Guards' run hooks and spans against a real API server, with the real OpenTelemetry SDK: two
replicas (threads, each with its own client, identity and hooks) fire the same ticks; the one
that runs a tick hears `started` and `succeeded` once, the other `skipped` with its reason;
a raising body is heard as `failed` with its exception; each run is one span with the run's
attributes, a child of the caller's span, and the parent of the body's spans. And snapping:
two `job=` guards whose triggers fire 0.4 s apart within one period claim the same tick."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client import ApiClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from operator_helpers import apply_job, jobruns

from leasecron.kube.clients import Kube
from leasecron.models.names import jobrun_name
from leasecron.models.schedules import Schedule
from leasecron.models.specs import Outcome
from leasecron.runtime import (
    Guard,
    GuardRun,
    RunEvent,
    RunEventKind,
    aclose_guards,
    close_guards,
    current_run,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("closed_guards")]
REPLICAS = 2
ROUNDS = 4
TAKEN = {"taken", "live_grant", "conflict", "exists"}
STARTED, SUCCEEDED, FAILED, SKIPPED = (
    RunEventKind.STARTED,
    RunEventKind.SUCCEEDED,
    RunEventKind.FAILED,
    RunEventKind.SKIPPED,
)
APP = trace.get_tracer("app")


class Heard:
    """Every RunEvent one replica's hooks heard (on the hooks' thread)."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self._lock = threading.Lock()

    def __call__(self, event: RunEvent) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, kind: RunEventKind, tick: datetime) -> list[RunEvent]:
        with self._lock:
            return [e for e in self.events if e.kind is kind and e.tick == tick]


def recent_ticks(count: int) -> list[datetime]:
    now = datetime.now(UTC).replace(microsecond=0)
    return [now - timedelta(seconds=count - i) for i in range(count)]


def together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Call each of `calls` in its own thread at the same moment; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def fire(index: int) -> None:
        barrier.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def run_spans(exporter: InMemorySpanExporter, job: str) -> dict[str, ReadableSpan]:
    """The run spans of `job` by their tick attribute."""
    found = [s for s in exporter.get_finished_spans() if s.name == f"leasecron.run {job}"]
    by_tick = {str((s.attributes or {})["leasecron.tick"]): s for s in found}
    assert len(by_tick) == len(found), "two spans for one tick"
    return by_tick


def test_the_replica_that_runs_a_tick_hears_started_and_succeeded_once_and_the_other_skipped(
    kubes: list[Kube], namespace: str, spans: InMemorySpanExporter
) -> None:
    heard = [Heard() for _ in range(REPLICAS)]
    guards = [
        Guard(
            "send-reminders",
            namespace=namespace,
            kube=kubes[i],
            identity=f"replica-{i}",
            at_most_for="3s",
            hooks=[heard[i]],
        )
        for i in range(REPLICAS)
    ]
    callers: dict[tuple[int, datetime], int] = {}
    """The span id of the caller's span of each (replica, tick)."""

    def fire(index: int, tick: datetime) -> Callable[[], GuardRun]:
        def call() -> GuardRun:
            with APP.start_as_current_span("scheduler job") as outer:
                callers[index, tick] = outer.get_span_context().span_id
                with guards[index].claim(tick=tick) as run:
                    if run:
                        assert current_run() is run
                        APP.start_span("send reminders").end()  # a child of the run's span
                return run

        return call

    ticks = recent_ticks(ROUNDS)
    rounds = [together([fire(i, tick) for i in range(REPLICAS)]) for tick in ticks]
    close_guards()  # waits for the hooks' queued events
    children = [s for s in spans.get_finished_spans() if s.name == "send reminders"]
    by_tick = run_spans(spans, "send-reminders")
    assert len(by_tick) == ROUNDS
    for tick, runs in zip(ticks, rounds, strict=True):
        [runner] = [i for i, run in enumerate(runs) if run]
        other = 1 - runner
        run = runs[runner]
        [started] = heard[runner].of(STARTED, tick)
        [succeeded] = heard[runner].of(SUCCEEDED, tick)
        assert (started.job, started.token, started.holder) == (
            "send-reminders",
            run.token,
            f"replica-{runner}",
        )
        assert succeeded.outcome is Outcome.SUCCEEDED and succeeded.duration is not None
        assert not heard[runner].of(SKIPPED, tick)
        assert not heard[other].of(STARTED, tick) and not heard[other].of(SUCCEEDED, tick)
        [skipped] = heard[other].of(SKIPPED, tick)
        assert skipped.reason == runs[other].reason and skipped.reason in TAKEN
        assert skipped.holder == f"replica-{other}"
        span = by_tick[f"{tick:%Y-%m-%dT%H:%M:%SZ}"]
        attributes = dict(span.attributes or {})
        assert attributes["leasecron.job"] == "send-reminders"
        assert attributes["leasecron.namespace"] == namespace
        assert attributes["leasecron.token"] == run.token
        assert attributes["leasecron.holder"] == f"replica-{runner}"
        assert attributes["leasecron.bucket"] == "once-per-tick"
        assert attributes["leasecron.outcome"] == "Succeeded"
        assert span.parent is not None and span.parent.span_id == callers[runner, tick]
        assert any(c.parent and c.parent.span_id == span.context.span_id for c in children)


def test_a_raising_body_is_heard_as_failed_with_its_exception_and_its_span_is_an_error(
    kubes: list[Kube], namespace: str, spans: InMemorySpanExporter
) -> None:
    heard = Heard()
    guard = Guard("flaky", every="1s", namespace=namespace, kube=kubes[0], identity="replica-0")
    guard.on_start(heard)
    guard.on_failure(heard)
    raised: list[BaseException] = []

    @guard
    async def flaky() -> None:
        error = ValueError(f"bad row at token {current_run().token}")
        raised.append(error)
        raise error

    async def main() -> None:
        with (
            APP.start_as_current_span("request") as outer,
            pytest.raises(ValueError, match="bad row"),
        ):
            await flaky()
        assert span_parent[0] is None
        span_parent[0] = outer.get_span_context().span_id
        await aclose_guards()  # waits for the hooks' queued events

    span_parent: list[int | None] = [None]
    asyncio.run(main())
    [error] = raised
    [started] = [e for e in heard.events if e.kind is STARTED]
    [failed] = [e for e in heard.events if e.kind is FAILED]
    assert failed.error is error and failed.outcome is Outcome.FAILED
    assert failed.message == f"ValueError: {error}" and failed.token == started.token
    [span] = run_spans(spans, "flaky").values()
    assert (span.attributes or {})["leasecron.outcome"] == "Failed"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == f"ValueError: {error}"
    assert span.parent is not None and span.parent.span_id == span_parent[0]


def test_two_job_guards_whose_triggers_fire_0_4s_apart_in_one_period_claim_the_same_tick(
    kube_api: ApiClient, kubes: list[Kube], namespace: str
) -> None:
    apply_job(kube_api, namespace, "report", schedule="@every 2s", startingDeadline="30s")
    guards = [
        Guard("report", job="report", namespace=namespace, kube=kubes[i], identity=f"r{i}")
        for i in range(REPLICAS)
    ]
    tick = Schedule.parse("@every 2s").latest_at_or_before(datetime.now(UTC))
    assert tick is not None
    # The previous tick, one after the other: the guard Lease exists (created above the
    # job's token floor) before the replicas race.
    for guard in guards:
        with guard.claim(tick=tick - timedelta(seconds=1.5), snap=True):
            pass
    # Interval triggers started 0.4 s apart: one fires before a whole second, one after it.
    fired = [tick + timedelta(seconds=0.8), tick + timedelta(seconds=1.2)]

    def fire(index: int) -> Callable[[], GuardRun]:
        def call() -> GuardRun:
            with guards[index].claim(tick=fired[index], snap=True) as run:
                return run

        return call

    runs: list[GuardRun] = together([fire(i) for i in range(REPLICAS)])
    assert [run.tick for run in runs] == [tick, tick]
    [ran] = [run for run in runs if run]
    [other] = [run for run in runs if not run]
    assert other.reason in TAKEN
    names = {r["metadata"]["name"]: r for r in jobruns(kube_api, namespace)}
    assert set(names) == {jobrun_name("report", t) for t in (tick - timedelta(seconds=2), tick)}
    assert names[jobrun_name("report", tick)]["spec"]["holder"] == ran.holder
