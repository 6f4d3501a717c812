"""The operator's view of the cluster: ScheduledJobs (fed by kopf's watch), and Leases and
JobRuns kept by leasecron's own watch-fed `Informer`s, indexed so that one job's snapshot costs
no request and no scan.

Owns the caches and indexes, the mapping from a changed object to the jobs it affects (which
it reports through `on_dirty`), and `snapshot()`. Leases are watched by the existence of the
label `leasecron.dev/role`, so every role is seen: election Leases (a single-owner job's is the
`leader` Lease labelled with its job), shard Leases and group records (once-per-tick), member
and guard Leases; JobRuns by `leasecron.dev/job`.

A once-per-tick job's ticks are claimed on one shard Lease of its group: the group record
(`leasecron-group-<group>`, annotation `leasecron.dev/shards`) gives the shard count, or
`DEFAULT_SHARDS` while the group has no readable record, and `models.groups.shard_ref` the
Lease. A change of a shard Lease marks the jobs placed on it; a change of a group record marks
every job of the group. A job Lease seen deleted is reported with its job's name and its last
token (`on_lease_gone`), so that its token can be kept as a floor. Does not write anything:
`_reconciler` does.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from leasecron.coordination.members import ROLE_MEMBER
from leasecron.kube.clients import Kube, collection_path
from leasecron.kube.leases import LeaseStore
from leasecron.kube.watches import Informer, WatchEvent
from leasecron.models.clocks import Clock
from leasecron.models.decisions import Observation
from leasecron.models.groups import (
    ROLE_GROUP,
    GroupState,
    Placement,
    group_lease_name,
    recorded_state,
)
from leasecron.models.leases import parse_lease
from leasecron.models.names import (
    GROUP,
    JOBRUN_PLURAL,
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    VERSION,
    job_lease_name,
)
from leasecron.models.specs import job_label_value
from leasecron.models.vocabulary import LEGACY_GUARD, Role, role_of
from leasecron.operator._facts import Invalid, JobFacts, read_job
from leasecron.operator._observed import (
    Member,
    RunView,
    Snapshot,
    member_from_lease,
    run_from_object,
)

Key = tuple[str, str]
"""(namespace, name) of a ScheduledJob."""
ROLE_LEADER = Role.LEADER
ROLE_SHARD = Role.SHARD
SCHEDULEDJOB_KIND = "ScheduledJob"
LeaseGone = Callable[[str, str, int], None]
"""(namespace, job name, last fencing token) of a job Lease seen deleted."""


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _metadata(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _key(obj: Mapping[str, Any]) -> Key:
    metadata = _metadata(obj)
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


def newer_or_same(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether `candidate` is not older than `current`, by resourceVersion. Versions are
    opaque, but etcd's are integers; when either is not, the candidate wins."""
    if current is None:
        return True
    a = str(_metadata(candidate).get("resourceVersion") or "")
    b = str(_metadata(current).get("resourceVersion") or "")
    if a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True


class World:
    """Caches and indexes for the reconciler; every method runs in the event loop thread."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespaces: Sequence[str],
        clock: Clock,
        on_dirty: Callable[[Key], None],
        on_lease_gone: LeaseGone | None = None,
    ) -> None:
        self._clock = clock
        self._on_dirty = on_dirty
        self._on_lease_gone = on_lease_gone
        scopes: list[str | None] = list(namespaces) or [None]
        leases = LeaseStore(kube)
        self._leases: dict[str | None, Informer] = {
            ns: Informer(
                kube,
                path=leases.collection_path(namespace=ns),
                label_selector=LABEL_ROLE,
                clock=clock,
            )
            for ns in scopes
        }
        self._runs: dict[str | None, Informer] = {
            ns: Informer(
                kube,
                path=collection_path(
                    group=GROUP, version=VERSION, plural=JOBRUN_PLURAL, namespace=ns
                ),
                label_selector=LABEL_JOB,
                clock=clock,
            )
            for ns in scopes
        }
        self.jobs: dict[Key, dict[str, Any]] = {}
        self._facts: dict[Key, tuple[tuple[str, int], JobFacts | Invalid]] = {}
        self._job_group: dict[Key, str] = {}
        self._by_group: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_label: dict[tuple[str, str], str] = {}
        self._run_index: dict[tuple[str, str], dict[str, RunView]] = defaultdict(dict)
        self._member_index: dict[tuple[str, str], dict[str, Member]] = defaultdict(dict)
        self._guard_index: dict[tuple[str, str], set[str]] = defaultdict(set)
        """Guard Leases by (namespace, job label): the job guards' Leases of each job."""
        self._placed: dict[Key, tuple[Placement, str]] = {}
        """(shard count, shard Lease) each once-per-tick job was last placed on."""
        self._started: set[int] = set()
        for informer in self._leases.values():
            informer.subscribe(self._lease_event)
        for informer in self._runs.values():
            informer.subscribe(self._run_event)

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """List and start watching Leases and JobRuns; returns once all caches are synced.
        Raises the KubeError of a failed list; calling it again resumes where it failed."""
        for informer in [*self._leases.values(), *self._runs.values()]:
            if id(informer) not in self._started:
                await informer.start()
                self._started.add(id(informer))

    async def stop(self) -> None:
        for informer in [*self._leases.values(), *self._runs.values()]:
            await informer.stop()

    @property
    def healthy(self) -> bool:
        return all(i.healthy for i in [*self._leases.values(), *self._runs.values()])

    # --- ScheduledJobs (from kopf) ----------------------------------------------------

    def upsert_job(self, obj: Mapping[str, Any], *, quiet: bool = False) -> None:
        """A ScheduledJob as seen by a watch event or returned by our own status patch
        (`quiet`: it needs no new pass). Older or unchanged versions are ignored."""
        key = _key(obj)
        current = self.jobs.get(key)
        if not newer_or_same(obj, current):
            return
        version = str(_metadata(obj).get("resourceVersion") or "")
        if current is not None and version and version == _metadata(current).get("resourceVersion"):
            return
        self.jobs[key] = copy.deepcopy(dict(obj))
        facts = self.facts(key)
        namespace, name = key
        self._by_label[(namespace, job_label_value(name))] = name
        group = facts.group if isinstance(facts, JobFacts) else None
        old = self._job_group.pop(key, None)
        if old is not None:
            self._by_group[(namespace, old)].discard(name)
        if group is not None:
            self._job_group[key] = group
            self._by_group[(namespace, group)].add(name)
        if not quiet:
            self._on_dirty(key)

    def remove_job(self, key: Key) -> None:
        namespace, name = key
        self.jobs.pop(key, None)
        self._facts.pop(key, None)
        self._placed.pop(key, None)
        self._by_label.pop((namespace, job_label_value(name)), None)
        group = self._job_group.pop(key, None)
        if group is not None:
            self._by_group[(namespace, group)].discard(name)

    def facts(self, key: Key) -> JobFacts | Invalid:
        """The facts of a cached job, validated once per (uid, generation)."""
        obj = self.jobs[key]
        metadata = _metadata(obj)
        version = (str(metadata.get("uid") or ""), int(metadata.get("generation") or 0))
        cached = self._facts.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        facts = read_job(obj)
        self._facts[key] = (version, facts)
        return facts

    # --- Leases and JobRuns -----------------------------------------------------------

    def _informer(self, table: dict[str | None, Informer], namespace: str) -> Informer | None:
        return table.get(namespace) or table.get(None)

    def lease(self, namespace: str, name: str | None) -> Observation | None:
        """The Lease `name` and when this process first saw its current version."""
        informer = self._informer(self._leases, namespace)
        if name is None or informer is None:
            return None
        obj = informer.get(namespace, name)
        observed = informer.observed_at(namespace, name)
        if obj is None or observed is None:
            return None
        return Observation(record=parse_lease(obj), observed_at=observed)

    def group_state(self, namespace: str, group: str) -> GroupState:
        """What the group's record says; `DEFAULT_SHARDS` (and no floor) while the group has
        no record or one that does not read (the replicas refuse to claim under one)."""
        informer = self._informer(self._leases, namespace)
        raw = informer.get(namespace, group_lease_name(group)) if informer is not None else None
        return recorded_state(raw)

    def shard_lease(self, namespace: str, facts: JobFacts, state: GroupState) -> str | None:
        """The shard Lease that claims a once-per-tick job's ticks under `state`."""
        if not facts.sharded:
            return None
        key = (namespace, facts.ref.name)
        placed = self._placed.get(key)
        if placed is None or placed[0] != state.placement:
            placed = (state.placement, state.ref(facts.group, facts.ref.name).lease)
            self._placed[key] = placed
        return placed[1]

    def run_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        informer = self._informer(self._runs, namespace)
        return informer.get(namespace, name) if informer is not None else None

    def _dirty_group(self, namespace: str, group: str) -> None:
        for name in list(self._by_group.get((namespace, group), ())):
            self._on_dirty((namespace, name))

    def _lease_event(self, event: WatchEvent) -> None:
        if not event.obj:  # SYNCED after a relist: anything may have changed
            self._dirty_all()
            return
        namespace, name = _key(event.obj)
        labels = _labels(event.obj)
        role, group = role_of(labels), str(labels.get(LABEL_GROUP) or "")
        if labels.get(LABEL_ROLE) == LEGACY_GUARD:
            self._guard_event(event, namespace, name, str(labels.get(LABEL_JOB) or ""))
        elif role == ROLE_MEMBER:
            members = self._member_index[(namespace, group)]
            if event.type == "DELETED":
                members.pop(name, None)
            else:
                members[name] = member_from_lease(event.obj, observed_at=event.observed_at)
            self._dirty_group(namespace, group)
        elif role == ROLE_GROUP and not group:
            self._dirty_all()
        elif role == ROLE_GROUP:
            self._dirty_group(namespace, group)
        elif role == ROLE_SHARD and group:  # with no group: a plain guard's, no job's
            self._dirty_shard(namespace, group, name)
        elif role != ROLE_SHARD:
            job = self._by_label.get((namespace, str(labels.get(LABEL_JOB) or "")))
            if event.type == "DELETED" and role == ROLE_LEADER:
                self._lease_gone(namespace, job, event.obj)
            if job is not None and job_lease_name(job) == name:
                self._on_dirty((namespace, job))

    def _guard_event(self, event: WatchEvent, namespace: str, name: str, label: str) -> None:
        """A guard lock of an earlier version (labelled `guard`; a `job=` guard's with its
        job): the job's `status.holder` reads it."""
        guards = self._guard_index[(namespace, label)]
        if event.type == "DELETED":
            guards.discard(name)
        else:
            guards.add(name)
        job = self._by_label.get((namespace, label))
        if job is not None:
            self._on_dirty((namespace, job))

    def _dirty_shard(self, namespace: str, group: str, lease: str) -> None:
        """Mark the jobs placed on shard Lease `lease` (all of the group's until placed)."""
        for name in list(self._by_group.get((namespace, group), ())):
            placed = self._placed.get((namespace, name))
            if placed is None or placed[1] == lease:
                self._on_dirty((namespace, name))

    def _lease_gone(self, namespace: str, job: str | None, obj: Mapping[str, Any]) -> None:
        """Report a deleted job Lease with its job (its owner, else the cached job of its
        label) and its last token, as the DELETED event carried it."""
        refs = _metadata(obj).get("ownerReferences")
        for ref in refs if isinstance(refs, list) else []:
            if isinstance(ref, Mapping) and ref.get("kind") == SCHEDULEDJOB_KIND:
                job = str(ref.get("name") or "") or job
        token = parse_lease(obj).transitions
        if not job or job_lease_name(job) != str(_metadata(obj).get("name") or ""):
            return
        if token > 0 and self._on_lease_gone is not None:
            self._on_lease_gone(namespace, job, token)

    def note_run(self, obj: Mapping[str, Any]) -> None:
        """A JobRun as our own write returned it, indexed before its watch event arrives."""
        namespace, name = _key(obj)
        label = str(_labels(obj).get(LABEL_JOB) or "")
        self._run_index[(namespace, label)][name] = run_from_object(obj)

    def forget_run(self, namespace: str, job: str, name: str) -> None:
        """A JobRun we deleted, dropped before its watch event arrives."""
        self._run_index[(namespace, job_label_value(job))].pop(name, None)

    def _run_event(self, event: WatchEvent) -> None:
        if not event.obj:
            self._dirty_all()
            return
        namespace, name = _key(event.obj)
        label = str(_labels(event.obj).get(LABEL_JOB) or "")
        runs = self._run_index[(namespace, label)]
        if event.type == "DELETED":
            runs.pop(name, None)
        else:
            runs[name] = run_from_object(event.obj)
        job = self._by_label.get((namespace, label))
        if job is not None:
            self._on_dirty((namespace, job))

    def _dirty_all(self) -> None:
        for key in list(self.jobs):
            self._on_dirty(key)

    def snapshot(self, facts: JobFacts, *, now: datetime, now_mono: float) -> Snapshot:
        """Everything the status logic reads for one valid job, from the caches."""
        namespace = facts.ref.namespace
        job_lease = self.lease(namespace, facts.job_lease)
        grant, shard, floor_tick = job_lease, None, None
        if facts.sharded:
            state = self.group_state(namespace, facts.group)
            shard, floor_tick = self.shard_lease(namespace, facts, state), state.floor_tick
            grant = self.lease(namespace, shard)
        label = job_label_value(facts.ref.name)
        runs = self._run_index.get((namespace, label), {})
        members = self._member_index.get((namespace, facts.group), {})
        guards = sorted(self._guard_index.get((namespace, label), ()))
        return Snapshot(
            job_lease=job_lease,
            grant=grant,
            runs=tuple(runs.values()),
            members=tuple(members.values()),
            now=now,
            now_mono=now_mono,
            shard_lease=shard,
            floor_tick=floor_tick,
            guard_grants=tuple(g for g in (self.lease(namespace, n) for n in guards) if g),
        )
