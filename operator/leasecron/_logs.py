"""structlog configuration: JSON lines on stderr, with job, tick, holder and token bound by
the callers that know them. Configured once by the CLI entry points; a library user who
configures structlog themselves keeps their own configuration."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure(*, level: str | None = None, json: bool = True) -> None:
    """Configure structlog and the stdlib root logger (kopf and kubernetes log through it)."""
    name = (level or os.environ.get("LEASECRON_LOG_LEVEL", "info")).upper()
    numeric = logging.getLevelNamesMapping().get(name, logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
