"""Structured logging: one JSON object per line (or readable columns on a terminal),
each with a stable ``event`` key."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

#: A resume link's path carries its token: ``/r/<token>`` (and any URL that contains it).
_RESUME_PATH = re.compile(r"/r/[^/\s?#\"']+")
REDACTED_PATH = "/r/[redacted]"


def redact(text: str) -> str:
    """``text`` with every resume-link token replaced: tokens never reach a log."""
    return _RESUME_PATH.sub(REDACTED_PATH, text) if "/r/" in text else text


def _redact_event(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value)
    return event


def configure_logging(level: str = "info") -> None:
    on_terminal = sys.stderr.isatty()
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if on_terminal else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _redact_event,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *([] if on_terminal else [structlog.processors.format_exc_info]),
            _redact_event,  # again: a formatted traceback may quote a path
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
