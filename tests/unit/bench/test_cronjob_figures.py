"""The CronJob comparison's pure parts: the objects it creates, the controller's command line,
the minutes it measures and the lag of each Job the controller made."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from leasecron.bench._cronjob import (
    GENEROUS_FLAGS,
    SCHEDULED_ANNOTATION,
    controller_argv,
    cronjob_body,
    cronjob_figures,
    job_lags,
    measured_minutes,
)


def _at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _job(scheduled: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {
            "annotations": {SCHEDULED_ANNOTATION: scheduled},
            "creationTimestamp": created,
        }
    }


def test_a_cronjob_fires_every_minute_and_its_jobs_need_no_pod() -> None:
    body = cronjob_body(7)

    assert body["metadata"]["name"] == "bench-cron-7"
    assert (body["spec"]["schedule"], body["spec"]["suspend"]) == ("* * * * *", False)
    assert body["spec"]["jobTemplate"]["spec"]["suspend"] is True


def test_the_controller_runs_the_cronjob_controller_alone_with_the_flags_added() -> None:
    argv = controller_argv("/bin/kcm", "/tmp/kubeconfig", GENEROUS_FLAGS)

    assert "--controllers=cronjob-controller" in argv
    assert {"--leader-elect=false", "--secure-port=0", "--kubeconfig=/tmp/kubeconfig"} <= set(argv)
    assert argv[-3:] == list(GENEROUS_FLAGS)


def test_the_measured_minutes_start_at_the_first_whole_minute_after_creation() -> None:
    minutes = measured_minutes(_at("2026-12-02T03:45:59.5"), 2)

    assert minutes == [_at("2026-12-02T03:46:00"), _at("2026-12-02T03:47:00")]


def test_a_jobs_lag_is_its_creation_minus_its_scheduled_time() -> None:
    jobs = [
        _job("2026-12-02T03:46:00Z", "2026-12-02T03:46:01Z"),
        _job("2026-12-02T03:46:00Z", "2026-12-02T03:46:59Z"),
        {"metadata": {"creationTimestamp": "2026-12-02T03:46:02Z"}},  # not the controller's
    ]

    assert job_lags(jobs) == [(_at("2026-12-02T03:46:00"), 1.0), (_at("2026-12-02T03:46:00"), 59.0)]


def test_runs_outside_the_measured_minutes_are_counted_apart_and_missing_ones_too() -> None:
    minute = _at("2026-12-02T03:46:00")
    lags = [(minute, 1.0), (minute, 3.0), (minute - 60.0, 70.0)]

    figures = cronjob_figures(lags, jobs=3, minutes=[minute], flags="default")

    assert (figures["expected"], figures["appeared"], figures["missing"]) == (3, 2, 1)
    assert figures["other_minutes"] == 1
    assert (figures["lag_p50_s"], figures["lag_max_s"]) == (2.0, 3.0)


def test_no_job_at_all_gives_no_lag_figures() -> None:
    figures = cronjob_figures([], jobs=2, minutes=[0.0], flags="generous")

    assert figures["appeared"] == 0
    assert figures["lag_p99_s"] is None
    assert not math.isnan(figures["missing"])
