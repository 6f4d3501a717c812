"""Loops: `ticks` needs a schedule every replica computes alike, and ends when told to."""

from __future__ import annotations

import threading

import pytest

from leasecron.integrations.loops import ticks


def test_ticks_end_at_once_when_the_stop_event_is_set() -> None:
    stop = threading.Event()
    stop.set()
    assert list(ticks(every="1m", stop=stop)) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": "500ms"}, "whole number of seconds"),
        ({"every": "1m", "cron": "* * * * *"}, "every= or cron="),
        ({}, "every= or cron="),
        ({"cron": "61 * * * *"}, "61"),
    ],
)
def test_ticks_refuse_a_schedule_replicas_could_not_share(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        next(ticks(**options))
