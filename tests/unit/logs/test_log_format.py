"""One log format per process: JSON lines when stderr is not a terminal, plain text when it
is, for structlog events and for standard-library records (kopf, the Kubernetes client)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from leasecron import _logs


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.mark.parametrize(
    ("stream", "env", "expected"),
    [
        (io.StringIO(), None, True),
        (_Terminal(), None, False),
        (_Terminal(), "json", True),
        (io.StringIO(), "console", False),
    ],
    ids=["pipe", "terminal", "forced-json", "forced-console"],
)
def test_json_is_chosen_unless_stderr_is_a_terminal(
    monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, env: str | None, expected: bool
) -> None:
    if env is None:
        monkeypatch.delenv(_logs.FORMAT_ENV, raising=False)
    else:
        monkeypatch.setenv(_logs.FORMAT_ENV, env)
    assert _logs.wants_json(stream) is expected


@pytest.mark.usefixtures("restore_logging")
def test_structlog_events_and_library_records_are_each_one_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _logs.configure(level="info", json=True)
    _logs.get_logger("leasecron.operator").info("active operator", identity="op-1")
    logging.getLogger("kopf.objects").warning("Handler failed\nwith two lines")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("kubernetes.client.rest").exception("request failed")

    lines = capsys.readouterr().err.splitlines()
    events = [json.loads(line) for line in lines]
    assert [(e["logger"], e["level"], e["event"]) for e in events] == [
        ("leasecron.operator", "info", "active operator"),
        ("kopf.objects", "warning", "Handler failed\nwith two lines"),
        ("kubernetes.client.rest", "error", "request failed"),
    ]
    assert events[0]["identity"] == "op-1"
    assert "RuntimeError: boom" in events[2]["exception"]


@pytest.mark.usefixtures("restore_logging")
def test_on_a_terminal_both_are_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    _logs.configure(level="info", json=False)
    _logs.get_logger("leasecron.operator").info("active operator")
    logging.getLogger("kopf.objects").warning("Handler failed")

    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert "active operator" in lines[0] and "Handler failed" in lines[1]
    assert not any(line.lstrip().startswith("{") for line in lines)
