"""What a process remembers of a guard Lease across its deletion: the highest token and the
latest tick it saw claimed; a corrupt tick far ahead is ignored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leasecron.models.leases import LeaseRecord
from leasecron.runtime._guard_marks import GuardMarks

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(token: int, tick: datetime | None) -> LeaseRecord:
    return LeaseRecord(name="leasecron-guard-g", namespace="ns", transitions=token, tick=tick)


def test_the_marks_keep_the_highest_token_and_latest_tick_when_the_lease_is_deleted() -> None:
    marks = GuardMarks()
    marks.note(record(4, NOW), now=NOW)
    marks.note(record(3, NOW - timedelta(seconds=5)), now=NOW)  # an older version, late
    marks.note(None, now=NOW)  # deleted
    assert (marks.token, marks.tick) == (4, NOW)
    assert marks.claimed(NOW) and marks.claimed(NOW - timedelta(seconds=1))
    assert not marks.claimed(NOW + timedelta(seconds=1))


def test_a_tick_more_than_a_day_ahead_is_corrupt_and_not_remembered() -> None:
    marks = GuardMarks()
    marks.note(record(2, NOW + timedelta(days=2)), now=NOW)
    assert marks.token == 2 and marks.tick is None
    assert not GuardMarks().claimed(NOW)
