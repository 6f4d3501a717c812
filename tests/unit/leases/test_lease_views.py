"""The process's view of its Leases: newest version wins, expiry is measured from when this
process first saw a version, corrupt records are reported once per version."""

from __future__ import annotations

from typing import Any

import structlog
from _lease_simulation import FakeCache

from leasecron.coordination import LeaseView
from leasecron.models.clocks import FakeClock

NS = "ns"


def lease(rv: str, holder: str = "a", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "l", "namespace": NS, "resourceVersion": rv},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 5, **spec},
    }


def test_a_write_response_newer_than_the_cache_is_used_until_the_watch_catches_up() -> None:
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    cache.deliver("ADDED", (NS, "l"), lease("7"))
    clock.advance(1)
    view.note(lease("9", holder="me"))
    seen = view.seen(NS, "l")
    assert seen is not None and seen.observation.record.holder == "me"
    assert seen.observation.observed_at == clock.monotonic()
    clock.advance(1)
    cache.deliver("MODIFIED", (NS, "l"), lease("9", holder="me"))
    seen = view.seen(NS, "l")
    assert seen is not None and seen.resource_version == "9"
    assert seen.observation.observed_at == clock.monotonic()  # the cache's copy now


def test_watchers_are_not_told_of_a_watch_event_older_than_our_own_write() -> None:
    """Our claim's reply (v9) is noted before the watch delivers our release before it (v8):
    a watcher must not see v8 as the Lease's news (it would take our fresh grant for lost)."""
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    cache.deliver("ADDED", (NS, "l"), lease("7", holder="me"))
    told: list[str | None] = []
    view.watch(
        NS, "l", lambda obj: told.append(obj["metadata"]["resourceVersion"] if obj else None)
    )
    view.note(lease("9", holder="me"))
    cache.deliver("MODIFIED", (NS, "l"), lease("8", holder=""))
    cache.deliver("MODIFIED", (NS, "l"), lease("9", holder="me"))
    cache.deliver("MODIFIED", (NS, "l"), lease("10", holder="other"))
    assert told == ["9", "10"]
    seen = view.seen(NS, "l")
    assert seen is not None and seen.observation.record.holder == "other"


def test_an_older_response_never_replaces_a_newer_cached_version() -> None:
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    cache.deliver("ADDED", (NS, "l"), lease("12", holder="b"))
    view.note(lease("10", holder="me"))
    seen = view.seen(NS, "l")
    assert seen is not None and seen.observation.record.holder == "b"


def test_expiry_is_measured_from_the_first_sight_of_a_version_not_from_later_reads() -> None:
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    cache.deliver("ADDED", (NS, "l"), lease("3"))
    first = clock.monotonic()
    clock.advance(4)
    seen = view.seen(NS, "l")
    assert seen is not None and seen.observation.observed_at == first


def test_one_shared_view_per_cache() -> None:
    cache = FakeCache(FakeClock())
    assert LeaseView.shared(cache) is LeaseView.shared(cache)
    assert LeaseView.shared(None) is not LeaseView.shared(None)


def test_a_corrupt_record_is_logged_once_per_resource_version() -> None:
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    with structlog.testing.capture_logs() as logs:
        cache.deliver("ADDED", (NS, "l"), lease("1", leaseDurationSeconds=-3))
        for _ in range(5):
            view.seen(NS, "l")
        cache.deliver("MODIFIED", (NS, "l"), lease("2", renewTime="noon"))
        for _ in range(5):
            view.seen(NS, "l")
    lines = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [entry["resource_version"] for entry in lines] == ["1", "2"]
    assert "leaseDurationSeconds -3" in lines[0]["problems"]
    assert "renewTime 'noon' is not a time" in lines[1]["problems"]


def test_watchers_of_one_lease_hear_its_changes_and_a_failing_watcher_is_contained() -> None:
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    heard: list[str | None] = []

    def broken(obj: dict[str, Any] | None) -> None:
        raise RuntimeError("watcher bug")

    def holder(obj: dict[str, Any] | None) -> None:
        heard.append(None if obj is None else str(obj["spec"]["holderIdentity"]))

    view.watch(NS, "l", broken)
    unwatch = view.watch(NS, "l", holder)
    cache.deliver("ADDED", (NS, "l"), lease("1", holder="a"))
    cache.deliver("ADDED", (NS, "other"), {**lease("2"), "metadata": {"name": "other"}})
    view.note(lease("3", holder="b"))
    unwatch()
    cache.deliver("MODIFIED", (NS, "l"), lease("4", holder="c"))
    assert heard == ["a", "b"]


def test_a_lease_is_parsed_once_per_resource_version() -> None:
    clock = FakeClock()
    cache = FakeCache(clock)
    view = LeaseView(cache, clock=clock)
    cache.deliver("ADDED", (NS, "l"), lease("5"))
    first, again = view.seen(NS, "l"), view.seen(NS, "l")
    assert first is not None and again is not None
    assert again.observation.record is first.observation.record
    cache.deliver("MODIFIED", (NS, "l"), lease("6", holder="b"))
    changed = view.seen(NS, "l")
    assert changed is not None and changed.observation.record.holder == "b"
