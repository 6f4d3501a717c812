"""Every run of an instant names its JobRun with the instant's stamp: made once, not per run."""

from __future__ import annotations

from datetime import UTC, datetime

from leasecron.models import names


def test_an_instants_jobrun_stamp_is_made_once_for_all_its_runs() -> None:
    names.tick_stamp.cache_clear()
    tick = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    for i in range(100):
        assert names.jobrun_name(f"job-{i}", tick) == f"job-{i}-20260101123000"
    assert names.tick_stamp.cache_info().misses == 1
