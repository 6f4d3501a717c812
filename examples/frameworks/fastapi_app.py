"""FastAPI with a leasecron Scheduler in its lifespan.

    uvicorn fastapi_app:app --port 8000                      # one worker per pod
    LEASECRON_ONE_PER_POD=1 uvicorn fastapi_app:app --workers 3   # one Scheduler per pod

The scheduler runs as a task on uvicorn's event loop, after the app's own lifespan set up
what handlers use and stopped before it closes it. uvicorn owns SIGTERM: it runs the
lifespan's shutdown, which stops the scheduler (Leases released). Keep uvicorn's
--timeout-graceful-shutdown and the pod's terminationGracePeriodSeconds above grace_period.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from jobs import POD_LOCK, scheduler, status

from leasecron.integrations import asgi


@asynccontextmanager
async def resources(app: FastAPI) -> AsyncIterator[None]:
    """The application's own lifespan: open a database pool here, close it after."""
    yield


app = FastAPI(lifespan=asgi.lifespan(scheduler, app_lifespan=resources, pod_lock=POD_LOCK))


@app.get("/leasecron")
def leasecron_status() -> dict[str, Any]:
    return status()
