"""Logging: structlog for leasecron's own events, and the standard library's `logging` (kopf,
the official Kubernetes client, urllib3, asyncio, `warnings`) routed through the same
processors, so a process writes one format only: one JSON object per line when stderr is not a
terminal (a pod, a pipe), or plain coloured text when it is. `LEASECRON_LOG_FORMAT=json` or
`console` overrides the choice.

Every JSON line has `event`, `level`, `logger` and `timestamp`; an exception is rendered into
the `exception` field of the same line. Job, tick, holder and token are bound by the callers
that know them. Configured once by the CLI entry points (and by `Scheduler.run_forever` when the
application has not configured structlog); a library user who configures structlog and
logging themselves keeps their own configuration. A Scheduler or guard embedded in an
application that configured neither defers to the standard library's `logging`
(`defer_to_logging`), as a library should.

Does not promise: that output written to stderr directly by other code (a C extension, a
`print`) or before `configure` runs (click's usage errors) is JSON.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import types
from typing import TextIO

import structlog

FORMAT_ENV = "LEASECRON_LOG_FORMAT"
LEVEL_ENV = "LEASECRON_LOG_LEVEL"
QUIET_LIBRARIES = ("kopf", "kubernetes", "urllib3", "aiohttp", "asyncio")


def wants_json(stream: TextIO | None = None) -> bool:
    """JSON unless `stream` (stderr) is a terminal; `LEASECRON_LOG_FORMAT` decides first."""
    chosen = os.environ.get(FORMAT_ENV, "").strip().lower()
    if chosen in ("json", "console"):
        return chosen == "json"
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def _shared_processors() -> list[structlog.typing.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]


def configure(*, level: str | None = None, json: bool | None = None) -> None:
    """Configure structlog and the stdlib root logger to write to stderr in one format:
    JSON lines when `json` (default: stderr is not a terminal), else plain text."""
    name = (level or os.environ.get(LEVEL_ENV, "info")).upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.INFO)
    as_json = wants_json() if json is None else json
    final: list[structlog.typing.Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if as_json
        else [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    )
    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_shared_processors(),
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # Libraries log from WARNING up unless debugging is asked for (they are chatty at INFO).
    quiet = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
    for library in QUIET_LIBRARIES:
        logging.getLogger(library).setLevel(quiet)
    logging.captureWarnings(True)
    _route_uncaught()


def defer_to_logging() -> None:
    """Unless structlog is configured, send leasecron's events to the standard library's
    `logging` (loggers `leasecron.*`, one `key=value` line per event), so that an application
    that embeds a Scheduler or a guard (a web server, a worker) decides what is shown and where,
    as with any library: nothing below WARNING unless it configures logging. Without this,
    structlog's default would print every event, debug included, to stdout. Leaves the root
    logger and its handlers alone."""
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Not cached: the application (or its tests, with structlog.testing.capture_logs) may
        # configure structlog after leasecron's loggers were first used.
        cache_logger_on_first_use=False,
    )


def _route_uncaught() -> None:
    """Uncaught exceptions (main thread and other threads) become one error event each."""
    log = get_logger("leasecron.uncaught")

    def excepthook(
        kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
    ) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        log.critical("uncaught exception", exc_info=(kind, value, tb))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None:
            return
        thread = args.thread.name if args.thread is not None else "?"
        exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
        log.critical("uncaught exception in a thread", thread=thread, exc_info=exc_info)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
