"""Run hooks and run spans against a real API server: on two replicas of a once-per-tick job,
`started` and `succeeded` fire once per run on the replica that ran it and `skipped` on the
other; a failing handler fires `failed` with its exception; a hook that raises changes no
run's outcome; every run is one exported span carrying the run's attributes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from leasecron import JobContext, Scheduler
from leasecron.kube.clients import Kube
from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION, jobrun_name
from leasecron.models.specs import Outcome
from leasecron.runtime import RunEvent, RunEventKind, Tuning
from leasecron.testing import poll
from leasecron.testing.handlers import (
    CapturingHandler,
    run_tick_sync,
    scheduled_job,
    wait_for_jobruns,
)

pytestmark = pytest.mark.integration
FAST = Tuning(member_duration_s=3, member_renew_every=1.0, shard_lease_s=2)
STARTED, SUCCEEDED, FAILED, SKIPPED = (
    RunEventKind.STARTED,
    RunEventKind.SUCCEEDED,
    RunEventKind.FAILED,
    RunEventKind.SKIPPED,
)


class Heard:
    """Every RunEvent one replica's hooks heard (they run on its hook thread)."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self._lock = threading.Lock()

    def __call__(self, event: RunEvent) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, kind: RunEventKind, tick: datetime | None = None) -> list[RunEvent]:
        with self._lock:
            return [e for e in self.events if e.kind is kind and (tick is None or e.tick == tick)]


def create_job(api: Any, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, scheduled_job(name, schedule="@every 1s")
    )


def run_spans(exporter: InMemorySpanExporter, job: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == f"leasecron.run {job}"]


def hook_errors(kind: str) -> float:
    labels = {"event": kind, "reason": "raised"}
    return REGISTRY.get_sample_value("leasecron_hook_errors_total", labels) or 0.0


def test_started_and_succeeded_fire_once_per_run_on_its_replica_and_skipped_on_the_other(
    kube: Kube, kube_api: Any, namespace: str, spans: InMemorySpanExporter
) -> None:
    replicas: list[tuple[Scheduler, CapturingHandler, Heard]] = []
    for _ in range(2):
        heard = Heard()
        scheduler = Scheduler(
            namespace=namespace, kube=kube, tuning=FAST, grace_period=5, hooks=[heard]
        )

        def work(ctx: JobContext) -> None:
            with trace.get_tracer("app").start_as_current_span("send invoices"):
                pass

        capture = CapturingHandler(work)
        scheduler.register("invoices", capture)
        replicas.append((scheduler, capture, heard))
    create_job(kube_api, namespace, "invoices")
    for scheduler, _, _ in replicas:
        scheduler.start()
    both_up = datetime.now(UTC) + timedelta(seconds=1)  # ticks from here: both replicas see them

    def four_runs_since_both_up() -> list[tuple[Scheduler, Heard, JobContext]] | None:
        found = [(s, h, x) for s, c, h in replicas for x in list(c.contexts) if x.tick > both_up]
        return sorted(found, key=lambda run: run[2].tick)[:4] if len(found) >= 4 else None

    try:
        runs = poll(
            four_runs_since_both_up,
            timeout=60,
            what="4 runs of invoices once both replicas run",
        )
        assert len({ctx.tick for _, _, ctx in runs}) == len(runs), "a tick ran twice"
        others = {id(h): next(o for _, _, o in replicas if o is not h) for _, _, h in replicas}
        # The replica that did not run a tick skips it once it sees the claim.
        poll(
            lambda: all(others[id(h)].of(SKIPPED, ctx.tick) for _, h, ctx in runs),
            timeout=30,
            what="a skip of every run's tick on the other replica",
        )
    finally:
        for scheduler, _, _ in replicas:
            scheduler.stop()
    for scheduler, heard, ctx in runs:
        other = others[id(heard)]
        [started] = heard.of(STARTED, ctx.tick)
        [succeeded] = heard.of(SUCCEEDED, ctx.tick)
        assert (started.job, started.holder, started.token) == ("invoices", ctx.holder, ctx.token)
        assert (succeeded.outcome, succeeded.holder) == (Outcome.SUCCEEDED, scheduler.identity)
        assert succeeded.duration is not None and succeeded.error is None
        assert not other.of(STARTED, ctx.tick) and not other.of(SUCCEEDED, ctx.tick)
        skipped = other.of(SKIPPED, ctx.tick)
        assert skipped and all(e.reason and e.holder != ctx.holder for e in skipped)
    by_tick = {(s.attributes or {})["leasecron.tick"]: s for s in run_spans(spans, "invoices")}
    children = [s for s in spans.get_finished_spans() if s.name == "send invoices"]
    for _, _, ctx in runs:
        span = by_tick[f"{ctx.tick:%Y-%m-%dT%H:%M:%SZ}"]
        attributes = dict(span.attributes or {})
        assert attributes["leasecron.holder"] == ctx.holder
        assert attributes["leasecron.token"] == ctx.token
        assert attributes["leasecron.bucket"] == "once-per-tick"
        assert attributes["leasecron.outcome"] == "Succeeded"
        assert span.parent is None, "a tick's span is a root"
        assert any(c.parent and c.parent.span_id == span.context.span_id for c in children)


def test_a_failing_handler_fires_failed_with_its_error_and_a_raising_hook_changes_no_outcome(
    kube: Kube, kube_api: Any, namespace: str, spans: InMemorySpanExporter
) -> None:
    heard = Heard()
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, grace_period=5)
    raised: list[BaseException] = []

    def broken_hook(event: RunEvent) -> None:
        raise RuntimeError("the error tracker is down")

    for register in (scheduler.on_start, scheduler.on_success, scheduler.on_failure):
        register(broken_hook)
    scheduler.on_failure(heard)
    scheduler.on_success(heard)

    def flaky(ctx: JobContext) -> None:
        error = ValueError(f"bad row at {ctx.tick:%H:%M:%S}")
        raised.append(error)
        raise error

    failing, fine = CapturingHandler(flaky), CapturingHandler()
    scheduler.register("flaky", failing)
    scheduler.register("fine", fine)
    create_job(kube_api, namespace, "flaky")
    create_job(kube_api, namespace, "fine")
    before = hook_errors("failed")
    scheduler.start()
    try:
        assert failing.wait_calls(2, timeout=30) and fine.wait_calls(2, timeout=30)
        names = {jobrun_name(c.job, c.tick) for h in (failing, fine) for c in h.contexts[:2]}
        records = wait_for_jobruns(
            kube_api,
            namespace=namespace,
            until=lambda items: (
                names
                <= {
                    i["metadata"]["name"]
                    for i in items
                    if (i.get("status") or {}).get("outcome") not in (None, "Running")
                }
            ),
        )
    finally:
        scheduler.stop()
    outcomes = {r["metadata"]["name"]: r["status"] for r in records}
    for ctx in fine.contexts[:2]:
        assert outcomes[jobrun_name("fine", ctx.tick)]["outcome"] == "Succeeded"
        assert [e.outcome for e in heard.of(SUCCEEDED, ctx.tick)] == [Outcome.SUCCEEDED]
    for ctx, error in zip(failing.contexts[:2], raised, strict=False):
        status = outcomes[jobrun_name("flaky", ctx.tick)]
        assert status["outcome"] == "Failed" and status["message"] == f"ValueError: {error}"
        [failed] = [e for e in heard.of(FAILED, ctx.tick) if e.job == "flaky"]
        assert failed.error is error and failed.outcome is Outcome.FAILED
        assert failed.message == f"ValueError: {error}" and failed.token == ctx.token
        [span] = [
            s
            for s in run_spans(spans, "flaky")
            if (s.attributes or {})["leasecron.tick"] == f"{ctx.tick:%Y-%m-%dT%H:%M:%SZ}"
        ]
        assert (span.attributes or {})["leasecron.outcome"] == "Failed"
        assert span.status.description == f"ValueError: {error}"
    assert hook_errors("failed") >= before + 2


def test_run_once_is_a_span_under_the_callers_span_and_tells_the_hooks(
    kube: Kube, namespace: str, spans: InMemorySpanExporter
) -> None:
    heard = Heard()
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=FAST, hooks=[heard])
    scheduler.register("report", lambda ctx: None)
    with trace.get_tracer("app").start_as_current_span("manual trigger") as outer:
        result = run_tick_sync(scheduler, scheduled_job("report"))
    assert result.outcome == "Succeeded"
    [span] = run_spans(spans, "report")
    assert span.parent is not None and span.parent.span_id == outer.get_span_context().span_id
    # run_once returns once its hooks were told: no waiting needed.
    assert [e.kind for e in heard.events] == [STARTED, SUCCEEDED]
