"""Embedded in an application that configured neither structlog nor logging, leasecron logs
through the standard library's `logging` like any library: nothing below WARNING by default,
the application's logging configuration decides, and a structlog it configured is kept."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )


def test_debug_and_info_events_are_not_printed_unless_the_application_asks() -> None:
    out = run(
        """
        from leasecron import _logs
        log = _logs.get_logger("leasecron.runtime.shards")
        _logs.defer_to_logging()
        log.debug("tick skipped", job="a")
        log.info("scheduler started")
        log.warning("group record not read", job="a")
        """
    )
    assert out.stdout == ""
    assert "tick skipped" not in out.stderr and "scheduler started" not in out.stderr
    assert "group record not read" in out.stderr and "job=a" in out.stderr


def test_the_applications_logging_configuration_decides_level_and_destination() -> None:
    out = run(
        """
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s|%(message)s")
        from leasecron import _logs
        _logs.defer_to_logging()
        _logs.get_logger("leasecron.integrations.workers").info("pod lock taken", pid=7)
        _logs.get_logger("leasecron.integrations.workers").debug("polled")
        """
    )
    assert "leasecron.integrations.workers|" in out.stdout
    assert "pod lock taken" in out.stdout and "pid=7" in out.stdout
    assert "polled" not in out.stdout + out.stderr


def test_a_structlog_configuration_of_the_application_is_kept() -> None:
    out = run(
        """
        import structlog
        structlog.configure(processors=[structlog.processors.KeyValueRenderer()])
        from leasecron import _logs
        _logs.defer_to_logging()
        _logs.get_logger("leasecron.runtime").info("scheduler started", group="web")
        """
    )
    assert "event='scheduler started'" in out.stdout and "group='web'" in out.stdout


def test_loggers_used_before_the_application_configures_structlog_follow_its_config() -> None:
    out = run(
        """
        import structlog
        from leasecron import _logs
        _logs.defer_to_logging()
        log = _logs.get_logger("leasecron.runtime.jobs")
        log.warning("first use")
        structlog.configure(processors=[structlog.processors.KeyValueRenderer()])  # the app's
        with structlog.testing.capture_logs() as logs:
            log.info("invalid ScheduledJob skipped", generation=1)
        print([e["event"] for e in logs])
        """
    )
    assert out.stdout.strip() == "['invalid ScheduledJob skipped']"
