"""Member Leases: the body a replica writes (through its `MemberLease`), and who counts as a
live member."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from leasecron.coordination.members import MemberLease, live_members, member_selector
from leasecron.models.clocks import FakeClock
from leasecron.models.leases import LeaseRecord, lease_body
from leasecron.models.names import ANNOTATION_HANDLERS, member_lease_name

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Recording:
    """A store that keeps the body of each create (no server behind it)."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def create(
        self,
        *,
        namespace: str,
        body: dict[str, Any],
        timeout: object = None,  # noqa: ASYNC109
    ) -> Any:
        self.created.append(body)
        return body


def member_body(*, identity: str, group: str, handlers: list[str], duration: int = 15) -> Any:
    """What a replica's MemberLease writes first (its create)."""
    store = Recording()
    lease = MemberLease(
        store,  # type: ignore[arg-type]
        namespace="ns",
        group=group,
        identity=identity,
        handlers=lambda: handlers,
        clock=FakeClock(),
        duration_s=duration,
    )
    asyncio.run(lease.write())
    [body] = store.created
    return body


def record(holder: str, *, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(
        name=f"leasecron-member-g-{holder}",
        namespace="ns",
        holder=holder,
        lease_duration_s=duration,
        acquire_time=NOW,
        renew_time=NOW,
        resource_version="7",
    )


def test_the_member_lease_is_labelled_for_the_group_and_lists_the_handlers() -> None:
    body = member_body(identity="pod-a", group="billing", handlers=["b", "a"])
    assert body["metadata"]["labels"]["leasecron.dev/group"] == "billing"
    assert body["metadata"]["labels"]["leasecron.dev/role"] == "member"
    assert json.loads(body["metadata"]["annotations"]["leasecron.dev/handlers"]) == ["a", "b"]
    assert body["spec"]["holderIdentity"] == "pod-a"
    assert body["spec"]["leaseDurationSeconds"] == 15
    assert member_selector("billing") == "leasecron.dev/group=billing,leasecron.dev/role=member"


def test_a_member_is_live_until_its_lease_went_unchanged_for_its_duration() -> None:
    clock = FakeClock()
    objects = [
        member_body(identity="a", group="g", handlers=[], duration=15),
        member_body(identity="b", group="g", handlers=[], duration=3),
    ]
    seen: dict[tuple[str | None, str], float] = {
        ("ns", member_lease_name("g", "a")): clock.monotonic(),
        ("ns", member_lease_name("g", "b")): clock.monotonic(),
    }

    def members() -> list[str]:
        return live_members(
            objects,
            observed_at=lambda ns, name: seen.get((ns, name)),
            now=clock.monotonic(),
            identity="me",
            fallback_s=15,
        )

    assert members() == ["a", "b", "me"]
    clock.advance(3)
    assert members() == ["a", "me"]
    clock.advance(12)
    assert members() == ["me"]


def test_leases_without_a_holder_or_never_observed_do_not_count() -> None:
    free: dict[str, Any] = lease_body(record(""), labels={"leasecron.dev/role": "member"})
    unseen = member_body(identity="ghost", group="g", handlers=[])
    assert live_members(
        [free, unseen], observed_at=lambda ns, name: None, now=0.0, identity="me", fallback_s=15
    ) == ["me"]


def test_a_members_handlers_annotation_is_parsed_once_however_often_it_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every claim of a large instant asks for each member's handlers: the same annotation
    (thousands of names) is parsed once, and a changed one again."""
    from leasecron.coordination import members

    parses: list[str] = []
    real = json.loads
    monkeypatch.setattr(members.json, "loads", lambda raw: parses.append(raw) or real(raw))
    names = [f"job-{i}-parsed-once" for i in range(1000)]
    obj = {"metadata": {"annotations": {ANNOTATION_HANDLERS: json.dumps(names)}}}
    for _ in range(5):
        assert members.advertised_handlers(obj) == frozenset(names)
    changed = {"metadata": {"annotations": {ANNOTATION_HANDLERS: json.dumps(names[:3])}}}
    assert members.advertised_handlers(changed) == frozenset(names[:3])
    assert len(parses) == 2


def test_the_live_members_are_read_from_each_member_lease_once_per_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every claim of an instant asks who is live: a replica's `Membership` parses each
    member Lease once per resourceVersion, not on every question."""
    from leasecron.coordination import _views
    from leasecron.runtime._membership import Membership

    parses: list[str] = []
    real = _views.parse_lease
    monkeypatch.setattr(_views, "parse_lease", lambda obj: parses.append("x") or real(obj))
    clock = FakeClock()
    leases: Any = type("Leases", (), {"kube": None, "collection_path": lambda self, **_: "/l"})()
    membership = Membership(
        leases=leases, namespace="ns", group="g", identity="me", handlers=list, clock=clock
    )
    objects = []
    for i, identity in enumerate(["a", "b", "c"]):
        body = member_body(identity=identity, group="g", handlers=[])
        body["metadata"] |= {"namespace": "ns", "resourceVersion": str(i + 1)}
        objects.append(body)
    monkeypatch.setattr(membership.informer, "items", lambda: list(objects))
    monkeypatch.setattr(membership.informer, "observed_at", lambda ns, name: clock.monotonic())
    for _ in range(10):
        assert membership.members() == ["a", "b", "c", "me"]
    assert len(parses) == 3
    objects[0] = {**objects[0], "metadata": {**objects[0]["metadata"], "resourceVersion": "9"}}
    assert membership.members() == ["a", "b", "c", "me"]
    assert len(parses) == 4
