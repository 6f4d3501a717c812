"""A Scheduler in the lifespan of an ASGI application (FastAPI, Starlette, anything that speaks
the ASGI lifespan protocol).

    from fastapi import FastAPI
    from leasecron.integrations import asgi

    app = FastAPI(lifespan=asgi.lifespan(scheduler))                 # the whole lifespan
    app = FastAPI(lifespan=asgi.lifespan(scheduler, app_lifespan=db_lifespan))  # composed

    @asynccontextmanager                                             # or inside your own
    async def my_lifespan(app):
        async with db_pool(), asgi.running(scheduler):
            yield

The scheduler runs on the server's event loop as a task (`async with scheduler:`): no thread,
no signal handler. The server owns SIGTERM; uvicorn turns it into the lifespan's shutdown, which
stops the scheduler gracefully (running handlers finish or are stopped within its grace
period, Leases released) before the application's own lifespan closes what handlers use.
Startup waits until the scheduler runs, or failed once to reach the API server (it keeps
retrying in the background): an API server outage does not keep the application from serving.

With several workers per pod (`uvicorn --workers 3`), pass `pod_lock=PodLock.for_scheduler(
scheduler)` so that one worker of the pod runs it (see `leasecron.integrations.workers`).
Does not make the ASGI server's own graceful timeout longer than the scheduler's grace period:
configure both (uvicorn `--timeout-graceful-shutdown`, the pod's terminationGracePeriodSeconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from leasecron.integrations.workers import PodLock, lead_when_locked
from leasecron.runtime import Scheduler

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]
"""What `FastAPI(lifespan=...)` and `Starlette(lifespan=...)` take: app -> async context."""


def lifespan(
    scheduler: Scheduler,
    *,
    app_lifespan: Lifespan | None = None,
    pod_lock: PodLock | None = None,
) -> Lifespan:
    """A lifespan that runs `scheduler` while the application serves. `app_lifespan` (the
    application's own) is entered first and left last, so handlers can use what it sets up;
    the state it yields is passed on to the server unchanged."""
    made_in = os.getpid()

    @contextlib.asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Any]:
        async with contextlib.AsyncExitStack() as stack:
            state = None
            if app_lifespan is not None:
                state = await stack.enter_async_context(app_lifespan(app))
            await stack.enter_async_context(running(scheduler, pod_lock=pod_lock, made_in=made_in))
            yield state

    return run


@contextlib.asynccontextmanager
async def running(
    scheduler: Scheduler, *, pod_lock: PodLock | None = None, made_in: int | None = None
) -> AsyncIterator[Scheduler]:
    """Run `scheduler` on the running loop for the body of the `async with` (with `pod_lock`:
    whenever this process holds it). `made_in` is the pid of the process that configured the
    scheduler; starting it in another (a forked worker) is refused, since every worker forked
    from one Scheduler would share its identity."""
    if made_in is not None and made_in != os.getpid():
        raise RuntimeError(
            f"{scheduler!r} was made in process {made_in} and is started in its forked child "
            f"{os.getpid()}: every worker would share its identity. Import the application in "
            "each worker (no gunicorn --preload) so each makes its own Scheduler."
        )
    if pod_lock is None:
        async with scheduler:
            yield scheduler
        return

    async def lead(stop: asyncio.Event) -> None:
        async with scheduler:
            await stop.wait()

    stop = asyncio.Event()
    task = asyncio.get_running_loop().create_task(
        lead_when_locked(pod_lock, note=scheduler.identity, run=lead, stop=stop)
    )
    try:
        yield scheduler
    finally:
        stop.set()
        await task
