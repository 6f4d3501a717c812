"""Testing your handlers, in the spirit of `structlog.testing`: capture what a handler was
given, build ScheduledJob manifests, and run one tick of a registered handler against a
throwaway (or real) cluster exactly as a replica would.

    from leasecron.testing.handlers import CapturingHandler, run_tick_sync, scheduled_job

    capture = CapturingHandler(my_handler)
    scheduler.register("nightly_report", capture)
    result = run_tick_sync(scheduler, scheduled_job("nightly-report", schedule="0 2 * * *"),
                           kube=kube, namespace="billing")
    assert result.outcome == "Succeeded" and result.context.token is not None

Owns these helpers only. `run_tick` writes what a replica writes (the job's Lease, a member
Lease for the duration of the call, the JobRun); it does not clean them up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from leasecron.models.names import API_VERSION

__all__ = ["CapturingHandler", "scheduled_job"]


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
