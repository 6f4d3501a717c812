"""`GuardMembers`: the member Lease that makes a process's `job=` guards count as replicas of
their ScheduledJob's group, so that the operator shows such a job `Ready` with
`status.replicas` (docs/design.md §3) like a job a Scheduler runs.

Owns, per (client, namespace, group, identity) of one `GuardRuntime`: the handler names of the
jobs its guards run (each guard's ScheduledJob's `spec.handler`, by guard name: a job moved to
another group leaves the old group's list), and the member Lease that advertises them,
`member_lease_name(group, identity)`, written through `coordination.members.MemberLease`,
renewed every `RENEW_EVERY` seconds with a `DURATION_S` Lease (a Scheduler's defaults) and
deleted when the runtime closes (`close_guards()`, `aclose_guards()`, exit).

Its MemberLease is a guest (see `coordination.members`): a Scheduler of this process with the
same group and identity, or the guards of another event loop of the process, keep one Lease
with every handler, written by one of them, instead of overwriting each other's.

Started on a guard's first use, not when it is constructed: the group and handler are the
ScheduledJob's, known only once it is read from the API server, and a guard is often built
at import time (before a pre-forking server forks) where nothing may block, start a thread or
talk to the API server. The first write is not awaited by the claim that starts it: a member
Lease that cannot be written is logged and tried again, and never skips or delays a tick.
"""

from __future__ import annotations

import asyncio
import contextlib

from leasecron._logs import get_logger
from leasecron.coordination.members import MemberLease
from leasecron.kube.clients import Kube
from leasecron.kube.leases import LeaseStore
from leasecron.models.clocks import Clock

_log = get_logger("leasecron.runtime.guards")
DURATION_S = 15
RENEW_EVERY = 5.0
DELETE_TIMEOUT = 5.0


class GuardMembers:
    """The member Lease of one identity's job guards in one group (use it on its loop)."""

    def __init__(
        self, kube: Kube, *, namespace: str, group: str, identity: str, clock: Clock
    ) -> None:
        self._by_guard: dict[str, str] = {}
        self._lease = MemberLease(
            LeaseStore(kube),
            namespace=namespace,
            group=group,
            identity=identity,
            handlers=self.handlers,
            clock=clock,
            duration_s=DURATION_S,
            guest=True,
        )
        self.name = self._lease.name
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def handlers(self) -> list[str]:
        """The handler names advertised: those of the jobs of the guards seen so far."""
        return sorted(set(self._by_guard.values()))

    def advertise(self, guard: str, handler: str) -> None:
        """Guard `guard` runs a job of handler `handler`: keep the Lease from now on, and
        write it again soon when that is news."""
        news = self._by_guard.get(guard) != handler
        self._by_guard[guard] = handler
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._keep(), name=f"leasecron guard member {self.name}"
            )
        elif news:
            self._wake.set()

    def withdraw(self, guard: str) -> None:
        """Guard `guard` no longer runs a job of this group."""
        if self._by_guard.pop(guard, None) is not None:
            self._wake.set()

    async def _keep(self) -> None:
        while True:
            try:
                await self._lease.write()
            except Exception as e:  # the store, or anything else: tried again, never fatal
                _log.warning("guard member Lease not written", lease=self.name, error=repr(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=RENEW_EVERY)
            self._wake.clear()

    async def stop(self) -> None:
        """Stop renewing and delete the Lease (best effort: it expires anyway)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._lease.delete(), DELETE_TIMEOUT)
