"""Testing your handlers, in the spirit of `structlog.testing`: capture what a handler was
given, build ScheduledJob manifests, and run one tick of a registered handler against a
throwaway (or real) cluster exactly as a replica would.

    from leasecron.testing.handlers import CapturingHandler, run_tick_sync, scheduled_job

    scheduler = Scheduler("billing-api", kube=kube, namespace="billing")
    capture = CapturingHandler(my_handler)
    scheduler.register("nightly_report", capture)
    result = run_tick_sync(scheduler, scheduled_job("nightly-report", schedule="0 2 * * *"))
    assert result.outcome == "Succeeded" and result.context.token is not None

Owns these helpers only. `run_tick` writes what a replica writes (the job's Lease, a member
Lease for the duration of the call, the JobRun); it does not clean them up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from leasecron.models.names import API_VERSION

if TYPE_CHECKING:
    from leasecron.runtime import JobContext, RunResult, Scheduler

__all__ = [
    "CapturingHandler",
    "TickResult",
    "run_tick",
    "run_tick_sync",
    "scheduled_job",
    "wait_for_jobruns",
]


@dataclass(frozen=True)
class TickResult:
    """One tick run by `run_tick`: what `Scheduler.run_once` reported, the JobRun of the tick
    as the API server has it (None for every-replica jobs, or when another holder had the
    tick), and the structlog events emitted meanwhile."""

    result: RunResult
    jobrun: dict[str, Any] | None
    logs: list[MutableMapping[str, Any]]

    @property
    def context(self) -> JobContext:
        """The context the handler got for the asked tick; AssertionError when it did not
        run here."""
        runs = self.result.runs
        assert runs, f"{self.result.job} did not run here for {self.result.tick}"
        return runs[-1].context

    @property
    def outcome(self) -> str | None:
        outcome = self.result.outcome
        return outcome.value if outcome is not None else None


async def run_tick(
    scheduler: Scheduler,
    job: str | Mapping[str, Any],
    *,
    tick: datetime | None = None,
    timeout: float = 60.0,  # noqa: ASYNC109 - bounds the whole run
) -> TickResult:
    """Run one tick of `job` (a ScheduledJob name, or a manifest created when missing) with
    `scheduler`'s handlers against its cluster, as a replica would, and capture what
    happened. The scheduler must not be running; give it a `kube` for the test cluster."""
    from leasecron.kube.clients import Kube
    from leasecron.kube.jobruns import JobRunStore
    from leasecron.models.names import jobrun_name, term_jobrun_name

    with structlog.testing.capture_logs() as logs:
        result = await scheduler.run_once(job, tick=tick, timeout=timeout)
    jobrun = None
    ctx = result.runs[-1].context if result.runs else None
    if ctx is not None and ctx.token is not None:
        name = (
            term_jobrun_name(ctx.job, ctx.token)
            if ctx.bucket.value == "single-owner"
            else jobrun_name(ctx.job, ctx.tick)
        )
        kube = Kube.from_config() if scheduler.kube is None else scheduler.kube
        try:
            jobrun = await JobRunStore(kube).get(namespace=scheduler.namespace, name=name)
        finally:
            if scheduler.kube is None:
                await kube.close()
    return TickResult(result=result, jobrun=jobrun, logs=logs)


def run_tick_sync(
    scheduler: Scheduler,
    job: str | Mapping[str, Any],
    *,
    tick: datetime | None = None,
    timeout: float = 60.0,
) -> TickResult:
    """`run_tick` for sync tests (runs its own event loop)."""
    return asyncio.run(run_tick(scheduler, job, tick=tick, timeout=timeout))


def scheduled_job(
    name: str,
    *,
    bucket: str = "once-per-tick",
    schedule: str | None = "@every 1s",
    namespace: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ScheduledJob manifest. `spec` takes the spec's fields by their camelCase names
    (`group="billing"`, `handler="nightly_report"`, `lock={"atMostFor": "5s"}`); `schedule`
    is left out for single-owner jobs."""
    body: dict[str, Any] = {"bucket": bucket, **spec}
    if bucket != "single-owner" and schedule is not None:
        body["schedule"] = schedule
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": "ScheduledJob", "metadata": metadata, "spec": body}


class CapturingHandler:
    """A handler that records every JobContext it is called with, then calls `inner` (sync
    or async, optional) with it. Register the object itself to run it as a sync handler (in
    the thread pool), or its `run_async` method to run it as an asyncio task;
    `wait_calls(n)` blocks until it was called n times."""

    def __init__(self, inner: Callable[[Any], Any] | None = None) -> None:
        self.inner = inner
        self.contexts: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, ctx: Any) -> Any:
        self._note(ctx)
        if self.inner is None:
            return None
        result = self.inner(ctx)
        if isinstance(result, Awaitable):
            return asyncio.run(_await(result))
        return result

    async def run_async(self, ctx: Any) -> Any:
        """The same handler as a coroutine function."""
        self._note(ctx)
        if self.inner is None:
            return None
        result = self.inner(ctx)
        if isinstance(result, Awaitable):
            return await result
        return result

    def _note(self, ctx: Any) -> None:
        with self._cond:
            self.contexts.append(ctx)
            self._cond.notify_all()

    @property
    def calls(self) -> int:
        with self._cond:
            return len(self.contexts)

    def wait_calls(self, count: int, *, timeout: float = 30.0) -> bool:
        """Block until called at least `count` times; False when `timeout` passes first."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.contexts) >= count, timeout)


async def _await(result: Awaitable[Any]) -> Any:
    return await result


def _jobrun_items(api: Any, namespace: str, job: str | None) -> tuple[dict[str, Any], str]:
    from kubernetes import client

    from leasecron.models.names import GROUP, JOBRUN_PLURAL, LABEL_JOB, VERSION

    selector = f"{LABEL_JOB}={job}" if job else None
    listed: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, JOBRUN_PLURAL, label_selector=selector
    )
    items = {item["metadata"]["name"]: item for item in listed.get("items", [])}
    return items, str(listed["metadata"]["resourceVersion"])


def wait_for_jobruns(
    api: Any,
    *,
    namespace: str,
    until: Callable[[list[dict[str, Any]]], bool],
    job: str | None = None,
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Watch the JobRuns of `namespace` (of one `job` when given) until `until(items)` is
    true, and return them (sorted by name); TimeoutError naming what was seen otherwise.
    `api` is a `kubernetes.client.ApiClient`."""
    import time

    from kubernetes import client, watch

    from leasecron.models.names import GROUP, JOBRUN_PLURAL, LABEL_JOB, VERSION

    items, version = _jobrun_items(api, namespace, job)
    deadline = time.monotonic() + timeout

    def current() -> list[dict[str, Any]]:
        return [items[name] for name in sorted(items)]

    while not until(current()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            outcomes = {n: (i.get("status") or {}).get("outcome") for n, i in items.items()}
            raise TimeoutError(f"JobRuns in {namespace} after {timeout}s: {outcomes}")
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        selector = f"{LABEL_JOB}={job}" if job else None
        try:
            for event in stream.stream(  # type: ignore[no-untyped-call]
                client.CustomObjectsApi(api).list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                JOBRUN_PLURAL,
                label_selector=selector,
                resource_version=version,
                timeout_seconds=max(1, int(remaining)),
            ):
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] == "DELETED":
                    items.pop(obj["metadata"]["name"], None)
                else:
                    items[obj["metadata"]["name"]] = obj
                if until(current()):
                    break
        except client.ApiException as e:
            if e.status != 410:
                raise
            items, version = _jobrun_items(api, namespace, job)
        finally:
            stream.stop()  # type: ignore[no-untyped-call]
    return current()
