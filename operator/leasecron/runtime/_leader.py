"""once-per-tick jobs with `coordination: Leader`: the group's scheduler leader runs them.

Owns `GroupLeader`, an Elector on `leader_lease_name(group)` that runs only while this
replica has at least one Leader-coordinated job (so a group without one writes nothing), and
`LeaderDispatch`, which runs a tick only on the leader, through the one run-a-tick path.

Before it runs tick T of a job, the leader records T as the job's high-water mark on the
leader Lease (annotation `leasecron.dev/ticks`), conditional on the Lease still showing its
term; a tick at or below the mark is never run again, so a new leader whose clock runs behind
does not repeat a tick after a handover even when its JobRun was pruned. The JobRun create
still deduplicates. The election timings are those of the first such job by name, read when
the elector starts; a later change of them takes effect at the next start. Catch-up of ticks
missed while there was no leader is not done here: the leader runs the latest tick
(catchUp Latest/All) and the operator records the Missed ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime

from leasecron._logs import get_logger
from leasecron.coordination import Elector, Term
from leasecron.coordination.marks import Mark, mark_tick
from leasecron.models.configs import ElectionConfig
from leasecron.models.names import LABEL_GROUP, leader_lease_name
from leasecron.models.specs import Bucket, Coordination, ScheduledJob
from leasecron.runtime._invoke import RunControl
from leasecron.runtime._services import RecordMode, Services
from leasecron.runtime._ticks import TickOrder

_log = get_logger("leasecron.runtime.leader")


def uses_leader(job: ScheduledJob) -> bool:
    return job.spec.bucket is Bucket.ONCE_PER_TICK and job.spec.coordination is Coordination.LEADER


def election_config(job: ScheduledJob) -> ElectionConfig:
    election = job.spec.election
    return ElectionConfig(
        lease_duration=election.lease_duration,
        renew_deadline=election.renew_deadline,
        retry_period=election.retry_period,
    )


class GroupLeader:
    """The group's scheduler leader election, run while Leader-coordinated jobs exist."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._elector: Elector | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._jobs: set[str] = set()

    @property
    def term(self) -> Term | None:
        """The current term while this replica leads the group, else None."""
        return self._elector.term if self._elector is not None else None

    async def wait_leading(self) -> Term:
        """The term, once this replica leads the group (the election must be running)."""
        while True:
            elector = self._elector
            if elector is None:
                raise RuntimeError("the group leader election is not running")
            term = await elector.wait_leading()
            if term is not None:
                return term

    def ensure(self, jobs: Iterable[ScheduledJob]) -> None:
        """Start the election when a Leader-coordinated job exists, stop it when none does."""
        wanted = sorted((job for job in jobs if uses_leader(job)), key=lambda job: job.name)
        self._jobs = {job.name for job in wanted}
        if wanted and self._elector is None:
            services = self._services
            # The term's token fences every Leader job: above each one's floor.
            party = services.party(
                name=leader_lease_name(services.group),
                labels={LABEL_GROUP: services.group},
                floor=services.token_floor(*sorted(self._jobs)),
            )
            self._elector = Elector(
                services.kube,
                services.lease_cache,
                config=election_config(wanted[0]),
                **party,
            )
            self._elector.start()
        elif not wanted and self._elector is not None:
            elector, self._elector = self._elector, None
            task = asyncio.get_running_loop().create_task(elector.stop(release=True))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def mark(self, job: str, tick: datetime) -> Mark:
        """Record `tick` as `job`'s high-water mark on the leader Lease under the current
        term (see `coordination.marks`); marks of jobs no longer Leader-coordinated here are
        dropped."""
        elector = self._elector
        if elector is None:
            return Mark.NOT_LEADER
        return await mark_tick(elector, job, tick, keep=self._jobs)

    async def close(self) -> None:
        """Stop leading (releasing the Lease) and wait for earlier stops."""
        elector, self._elector = self._elector, None
        if elector is not None:
            await elector.stop(release=True)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


class LeaderDispatch:
    """Runs a tick of a Leader-coordinated job when this replica leads the group."""

    def __init__(self, services: Services, leader: GroupLeader) -> None:
        self._services = services
        self._leader = leader

    async def __call__(self, order: TickOrder, control: RunControl) -> None:
        services, job = self._services, order.job
        term = self._leader.term
        if term is None or not term.held:
            services.skip(job, "not_leader", tick=order.tick)
            return
        late = services.clock.now() > order.tick + job.spec.starting_deadline
        if late and not order.planned.catch_up:
            services.skip(job, "deadline", tick=order.tick)
            return
        marked = await self._leader.mark(job.name, order.tick)
        if marked is not Mark.MARKED:
            services.skip(job, marked.value, tick=order.tick)
            return
        unlink = services.stop_when_lost(term.lost, control)
        try:
            await services.run_tick(
                job,
                order.tick,
                control,
                fence=term,
                record=RecordMode.GUARDED,
                observe_lag=not late,
            )
        finally:
            unlink()
