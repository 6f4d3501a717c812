"""The kopf wiring, kept thin: one watch-event handler for ScheduledJobs that hands every
event to the reconciler (which validates and keeps status), kopf's settings, and running
kopf inside the operator's own event loop.

Why `@kopf.on.event` and not `on.create/update/resume/delete`: event handlers see every
create, update, the initial listing (resume) and every delete, and kopf stores no per-object
handler progress or diff-base for them, so kopf never patches a ScheduledJob. The status is
computed level-triggered from the whole object by the reconciler, so nothing is lost by not
having kopf's change detection. The job's Lease and JobRuns are owned by it and removed by
garbage collection; the one finalizer, `leasecron.dev/token-floor` (kept until the job's last
fencing token is recorded), is the reconciler's own (`_floors`), not kopf's.

kopf runs standalone (no kopf peering: leasecron's own Elector decides which operator is
active, and kopf is started only in the active one), without posting kopf's log lines as
Events, and without re-scanning CRDs and namespaces.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import kopf

from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION

JobEvent = Callable[[str | None, dict[str, Any]], None]


def registry_for(on_job_event: JobEvent) -> kopf.OperatorRegistry:
    """A private kopf registry with the ScheduledJob event handler and the login handler."""
    registry = kopf.OperatorRegistry()

    @kopf.on.event(GROUP, VERSION, SCHEDULEDJOB_PLURAL, registry=registry)
    async def scheduledjob_event(event: kopf.RawEvent, **_: Any) -> None:
        """Every ScheduledJob event: cache it and validate it; the reconciler does the rest.
        Async on purpose: kopf runs sync handlers in threads, and the caches belong to the
        event loop."""
        on_job_event(event.get("type"), dict(event["object"]))

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """Same credentials as the rest of the operator: in-cluster, else $KUBECONFIG."""
        return kopf.login_via_client(**kwargs)

    return registry


def settings() -> kopf.OperatorSettings:
    """kopf settings that keep it out of the way (see module doc)."""
    configured = kopf.OperatorSettings()
    configured.peering.standalone = True
    configured.posting.enabled = False
    configured.posting.level = logging.WARNING
    configured.scanning.disabled = True
    configured.batching.batch_window = 0.05
    return configured


async def run_kopf(
    *,
    on_job_event: JobEvent,
    namespaces: Sequence[str],
    stop_flag: asyncio.Event,
    ready_flag: asyncio.Event,
    after_spawn: Callable[[], None],
) -> None:
    """Run kopf until `stop_flag` is set. kopf installs SIGINT/SIGTERM handlers when it
    starts; `after_spawn` runs right after, so the caller can put its own back. Tasks that
    existed before kopf started are left alone by kopf's shutdown."""
    existing = set(asyncio.all_tasks())
    tasks = await kopf.spawn_tasks(
        registry=registry_for(on_job_event),
        settings=settings(),
        standalone=True,
        clusterwide=not namespaces,
        namespaces=list(namespaces),
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
    after_spawn()
    await kopf.run_tasks(tasks, ignored=existing)
