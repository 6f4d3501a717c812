"""The claim engine's access to its group record (`_shards.ShardTicks`, docs/design.md §5.8):
`ShardGroup` makes the `GroupRecord` (and the watch-fed `LeaseView` it reads) on first use,
reads (or creates) it once, in the background when the Scheduler starts and before any claim,
and tells the `GroupState` this replica follows: the shard count every replica of the group
hashes its jobs over, the floor tick and the token ceiling.
"""

from __future__ import annotations

import asyncio
import functools

from leasecron._logs import get_logger
from leasecron.coordination import LeaseView
from leasecron.coordination.groups import GroupRecord
from leasecron.kube.errors import KubeError
from leasecron.models.groups import GroupState
from leasecron.runtime._services import Services

_log = get_logger("leasecron.runtime.shards")


class ShardGroup:
    """The group record of one running Scheduler's claim engine."""

    def __init__(self, services: Services, *, shards: int) -> None:
        self._services = services
        self._shards = shards
        """The count this replica was configured with; the group record's count wins."""
        self._group: GroupRecord | None = None
        self._group_started: asyncio.Task[GroupState] | None = None

    @functools.cached_property
    def view(self) -> LeaseView:
        """The process's watch-fed view of the namespace's Leases."""
        services = self._services
        return LeaseView.shared(services.lease_cache, clock=services.clock)

    @property
    def record(self) -> GroupRecord:
        if self._group is None:
            services = self._services
            self._group = GroupRecord(
                services.kube,
                self.view,
                namespace=services.namespace,
                group=services.group,
                identity=services.identity,
                clock=services.clock,
                configured_shards=self._shards,
                prepare_shards=True,
            )
        return self._group

    def state(self) -> GroupState:
        """The group record as this replica follows it (its configured count until read)."""
        state = self.record.state if self._group is not None else None
        return state if state is not None else GroupState(shards=self._shards)

    async def ready(self) -> GroupState:
        """The group record, read (or created) once; raises KubeError while it cannot be."""
        task = self._group_started
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._group_started = asyncio.get_running_loop().create_task(
                self.record.start(), name="leasecron group record"
            )
        return await asyncio.shield(task)

    async def read(self) -> None:
        """Read (or create) the group record, again after each failure until it is."""
        delay = 0.5
        while True:
            try:
                state = await self.ready()
            except KubeError as e:
                _log.warning("group record not read; retrying", error=repr(e), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            _log.info("group record read", group=self._services.group, shards=state.shards)
            return

    def close(self) -> None:
        if self._group_started is not None and not self._group_started.done():
            self._group_started.cancel()
        if self._group is not None:
            self._group.close()
