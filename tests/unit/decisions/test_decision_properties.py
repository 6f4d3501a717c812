"""Properties of the claim decisions under any interleaving: replicas with lagging caches and
skewed wall clocks decide on what they last observed, and a simulated store applies their
writes conditionally on resourceVersion, as the API server does."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from hypothesis import example, given, settings
from hypothesis import strategies as st

from leasecron.models.configs import ElectionConfig, LockConfig
from leasecron.models.decisions import (
    Acquire,
    Claim,
    Observation,
    Release,
    Renew,
    Write,
    decide_claim,
    decide_election,
    decide_release,
    decide_renew,
)
from leasecron.models.leases import LeaseRecord

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PERIOD = 1.0
LOCK = LockConfig(at_most_for=2, at_least_for=0.5)
SKEWS = (0.0, -3.0, 2.0, -0.4, 0.0)


@dataclass
class Store:
    """The API server's view: one Lease, conditional writes."""

    rv: int = 0
    record: LeaseRecord | None = None

    def write(self, record: LeaseRecord, *, create: bool) -> LeaseRecord | None:
        if create and self.record is not None:
            return None  # AlreadyExists
        if not create and (self.record is None or record.resource_version != str(self.rv)):
            return None  # Conflict
        self.rv += 1
        self.record = replace(record, resource_version=str(self.rv))
        return self.record


@dataclass
class Replica:
    name: str
    skew: float
    seen: Observation | None = None
    grant: tuple[int, datetime, float, float] | None = None  # token, tick, acquired, until


@dataclass
class World:
    replicas: list[Replica]
    store: Store = field(default_factory=Store)
    mono: float = 0.0
    grants: list[tuple[str, datetime, int, float]] = field(default_factory=list)
    period: float = PERIOD

    def wall(self, replica: Replica) -> datetime:
        return EPOCH + timedelta(seconds=self.mono + replica.skew + 10.0)

    def tick(self, replica: Replica) -> datetime:
        seconds = (self.wall(replica) - EPOCH).total_seconds()
        return EPOCH + timedelta(seconds=(seconds // self.period) * self.period)

    def sync(self, replica: Replica) -> None:
        record = self.store.record
        if record is None:
            replica.seen = None
        elif (
            replica.seen is None or replica.seen.record.resource_version != record.resource_version
        ):
            replica.seen = Observation(record=record, observed_at=self.mono)

    def committed(self, replica: Replica, record: LeaseRecord) -> None:
        replica.seen = Observation(record=record, observed_at=self.mono)


actions = st.lists(
    st.tuples(
        st.sampled_from(["advance", "sync", "claim", "renew", "release"]),
        st.integers(0, len(SKEWS) - 1),
        st.sampled_from([0.05, 0.3, 1.0, 2.1, 3.5]),
    ),
    max_size=80,
)


def step_claim(world: World, replica: Replica) -> None:
    decision = decide_claim(
        current=replica.seen,
        tick=world.tick(replica),
        identity=replica.name,
        config=LOCK,
        now_mono=world.mono,
        now_wall=world.wall(replica),
        name="l",
        namespace="ns",
    )
    if not isinstance(decision, Claim):
        return
    before = world.store.record
    written = world.store.write(decision.record, create=decision.create)
    if written is None:
        return
    # The record the claim replaced did not show this tick (or a later one) already.
    claimed = decision.record.tick
    assert claimed is not None
    assert before is None or before.tick is None or before.tick < claimed
    for other in world.replicas:  # nobody else still believes in a live grant
        assert other.grant is None or other is replica or other.grant[3] <= world.mono
    until = world.mono + LOCK.lease_duration_s
    replica.grant = (decision.token, decision.record.tick, world.mono, until)  # type: ignore[assignment]
    world.grants.append((replica.name, decision.record.tick, decision.token, world.mono))  # type: ignore[arg-type]
    world.committed(replica, written)


def step_renew_or_release(world: World, replica: Replica, kind: str) -> None:
    if replica.grant is None or replica.seen is None:
        return
    token, _tick, acquired, until = replica.grant
    if until <= world.mono:  # the holder itself considers the grant lost: it writes nothing
        replica.grant = None
        return
    if kind == "renew":
        decision: Write | Release | object = decide_renew(
            current=replica.seen.record,
            identity=replica.name,
            token=token,
            config=LOCK,
            now_wall=world.wall(replica),
        )
    else:
        decision = decide_release(
            current=replica.seen.record,
            identity=replica.name,
            token=token,
            config=LOCK,
            acquired_mono=acquired,
            now_mono=world.mono,
            now_wall=world.wall(replica),
        )
    if not isinstance(decision, Write | Release):
        replica.grant = None
        return
    written = world.store.write(decision.record, create=False)
    if written is None:
        return
    world.committed(replica, written)
    if isinstance(decision, Release):
        replica.grant = None
    else:
        replica.grant = (token, _tick, acquired, world.mono + LOCK.lease_duration_s)


steps = st.lists(
    st.tuples(
        st.integers(0, len(SKEWS) - 1),
        st.sampled_from([0.0, 0.05, 0.3, 0.5, 1.0, 2.1]),
        st.booleans(),
        st.booleans(),
        st.sampled_from(["", "renew", "release"]),
    ),
    max_size=60,
)


@settings(max_examples=250, deadline=None)
@given(script=steps)
# r4 saw r0's fresh grant and claims the next tick 1 s later: the grant (2 s) is still live.
@example(script=[(0, 0.0, True, True, ""), (4, 0.0, True, False, ""), (4, 1.0, False, True, "")])
def test_no_interleaving_grants_a_tick_twice_or_overlaps_grants(
    script: list[tuple[int, float, bool, bool, str]],
) -> None:
    world = World([Replica(f"r{i}", skew) for i, skew in enumerate(SKEWS)])
    for index, wait, sync, claim, after in script:
        replica = world.replicas[index]
        world.mono += wait
        if sync:
            world.sync(replica)
        if claim:
            step_claim(world, replica)
        if after:
            step_renew_or_release(world, replica, after)
    ticks = [tick for _, tick, _, _ in world.grants]
    assert len(ticks) == len(set(ticks)), "a tick was granted twice"
    tokens = [token for _, _, token, _ in world.grants]
    assert tokens == sorted(set(tokens)), "tokens did not strictly increase"


lifecycle = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from([0.0, 0.1, 0.3, 0.6]),
        st.booleans(),
        st.sampled_from(["claim", "release", "renew"]),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(script=lifecycle)
# r0 runs the tick and frees the Lease after atLeastFor; r1 sees it free but with the tick.
@example(script=[(0, 0.0, True, "claim"), (0, 0.6, False, "release"), (1, 0.0, True, "claim")])
def test_a_tick_run_and_released_is_never_claimed_again_within_its_period(
    script: list[tuple[int, float, bool, str]],
) -> None:
    # A long period (5 s) against atLeastFor (0.5 s): most of each tick's period comes after
    # the release, which is where a release that forgets the tick would let it run again.
    world = World([Replica("r0", 0.0), Replica("r1", 0.0), Replica("r2", -0.4)], period=5.0)
    for index, wait, sync, action in script:
        replica = world.replicas[index]
        world.mono += wait
        if sync:
            world.sync(replica)
        if action == "claim":
            step_claim(world, replica)
        else:
            step_renew_or_release(world, replica, action)
    ticks = [tick for _, tick, _, _ in world.grants]
    assert len(ticks) == len(set(ticks)), f"a tick was run twice: {world.grants}"


@settings(max_examples=100, deadline=None)
@given(
    late_first=st.booleans(),
    waits=st.lists(st.sampled_from([0.1, 0.5, 1.0, 2.5]), min_size=1, max_size=30),
)
def test_a_replica_whose_clock_is_three_seconds_late_never_claims_a_recorded_tick(
    late_first: bool, waits: list[float]
) -> None:
    world = World([Replica("on-time", 0.0), Replica("late", -3.0)])
    on_time, late = world.replicas
    order = [late, on_time] if late_first else [on_time, late]
    for wait in waits:
        world.mono += wait
        for replica in order:
            world.sync(replica)
            recorded = world.store.record.tick if world.store.record else None
            before = len(world.grants)
            step_claim(world, replica)
            if len(world.grants) > before and replica is late:
                assert recorded is None or world.grants[-1][1] > recorded
            step_renew_or_release(world, replica, "release")


ELECTION = ElectionConfig(lease_duration=3, renew_deadline=2, retry_period=0.5)


@settings(max_examples=150, deadline=None)
@given(script=actions)
def test_election_terms_have_strictly_increasing_tokens_and_never_overlap(
    script: list[tuple[str, int, float]],
) -> None:
    store = Store()
    replicas = [Replica(f"r{i}", 0.0) for i in range(3)]
    mono = 0.0
    terms: list[int] = []
    for kind, index, seconds in script:
        replica = replicas[index % 3]
        if kind == "advance":
            mono += seconds
            continue
        if kind == "sync":
            record = store.record
            if record is None:
                replica.seen = None
            elif replica.seen is None or replica.seen.record != record:
                replica.seen = Observation(record=record, observed_at=mono)
            continue
        leading = replica.grant is not None and replica.grant[3] > mono
        decision = decide_election(
            current=replica.seen,
            leading=leading,
            identity=replica.name,
            config=ELECTION,
            now_mono=mono,
            now_wall=EPOCH,
            name="l",
            namespace="ns",
        )
        if not isinstance(decision, Acquire | Renew):
            continue
        written = store.write(
            decision.record, create=isinstance(decision, Acquire) and decision.create
        )
        if written is None:
            continue
        replica.seen = Observation(record=written, observed_at=mono)
        if isinstance(decision, Acquire):
            for other in replicas:
                assert other is replica or other.grant is None or other.grant[3] <= mono
            terms.append(written.transitions)
        replica.grant = (written.transitions, EPOCH, mono, mono + ELECTION.lease_duration_s)
    assert terms == sorted(set(terms))
