"""Member Leases: the body a replica writes, and who counts as a live member."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from leasecron.coordination.members import live_members, member_body, member_selector
from leasecron.models.clocks import FakeClock
from leasecron.models.leases import LeaseRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


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
    body = member_body(record=record("pod-a"), group="billing", handlers=["b", "a"])
    assert body["metadata"]["labels"]["leasecron.dev/group"] == "billing"
    assert body["metadata"]["labels"]["leasecron.dev/role"] == "member"
    assert json.loads(body["metadata"]["annotations"]["leasecron.dev/handlers"]) == ["a", "b"]
    assert body["spec"]["holderIdentity"] == "pod-a"
    assert body["spec"]["leaseDurationSeconds"] == 15
    assert member_selector("billing") == "leasecron.dev/group=billing,leasecron.dev/role=member"


def test_a_member_is_live_until_its_lease_went_unchanged_for_its_duration() -> None:
    clock = FakeClock()
    objects = [
        member_body(record=record("a", duration=15), group="g", handlers=[]),
        member_body(record=record("b", duration=3), group="g", handlers=[]),
    ]
    seen: dict[tuple[str | None, str], float] = {
        ("ns", "leasecron-member-g-a"): clock.monotonic(),
        ("ns", "leasecron-member-g-b"): clock.monotonic(),
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
    free: dict[str, Any] = member_body(record=record(""), group="g", handlers=[])
    unseen = member_body(record=record("ghost"), group="g", handlers=[])
    assert live_members(
        [free, unseen], observed_at=lambda ns, name: None, now=0.0, identity="me", fallback_s=15
    ) == ["me"]
