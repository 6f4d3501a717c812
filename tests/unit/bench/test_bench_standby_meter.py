"""StandbyMeter: requests a replica sends for a Lease while another replica's grant is live."""

from __future__ import annotations

from typing import Any

from leasecron.bench._through_coordination import CountingStore, StandbyMeter
from leasecron.kube.watches import WatchEvent


def _lease(holder: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "lease-a", "namespace": "ns", "resourceVersion": version},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 5, "leaseTransitions": 1},
    }


def _meter() -> tuple[StandbyMeter, CountingStore]:
    store = CountingStore(store=None)  # type: ignore[arg-type]
    return StandbyMeter("me", {"lease-a": store}), store


def test_requests_while_another_replica_holds_the_lease_are_counted_with_the_time() -> None:
    meter, store = _meter()

    meter.on_event(WatchEvent(type="MODIFIED", obj=_lease("other", "1"), observed_at=10.0))
    store.requests += 2
    meter.on_event(WatchEvent(type="MODIFIED", obj=_lease("", "2"), observed_at=10.5))

    assert (meter.requests, meter.seconds) == (2, 0.5)


def test_requests_while_the_lease_is_free_or_ours_are_not_standby_requests() -> None:
    meter, store = _meter()

    meter.on_event(WatchEvent(type="MODIFIED", obj=_lease("me", "1"), observed_at=10.0))
    store.requests += 3
    meter.on_event(WatchEvent(type="MODIFIED", obj=_lease("", "2"), observed_at=11.0))
    store.requests += 1

    assert (meter.requests, meter.seconds) == (0, 0.0)


def test_a_window_still_open_at_the_end_is_closed_by_finish() -> None:
    meter, store = _meter()

    meter.on_event(WatchEvent(type="ADDED", obj=_lease("other", "1"), observed_at=1.0))
    store.requests += 1
    meter.finish(3.0)

    assert (meter.requests, meter.seconds) == (1, 2.0)


def test_events_for_leases_it_does_not_track_are_ignored() -> None:
    meter, _ = _meter()
    other = _lease("other", "1")
    other["metadata"]["name"] = "someone-elses"

    meter.on_event(WatchEvent(type="ADDED", obj=other, observed_at=1.0))
    meter.finish(5.0)

    assert (meter.requests, meter.seconds) == (0, 0.0)
