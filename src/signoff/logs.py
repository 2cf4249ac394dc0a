"""Structured logging: one JSON object per line (or readable columns on a terminal),
each with a stable ``event`` key, always on stderr (stdout carries only what a command
prints for the user, such as a new API key)."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

#: Every place a URL carries a credential, in one table: the path segment after each
#: prefix (a resume link's token, a set-password link's token) and the value of each query
#: parameter (the identity provider's authorization code and state, tokens). Each is
#: written as ``[redacted]`` in every log line, whatever field or traceback holds it.
SECRET_PATH_PREFIXES = ("/r/", "/console/set-password/")
SECRET_QUERY_PARAMETERS = (
    "code",
    "state",
    "session_state",
    "token",
    "id_token",
    "access_token",
    "refresh_token",
)
REDACTED = "[redacted]"
_SECRET_PATH = re.compile(
    "(" + "|".join(re.escape(prefix) for prefix in SECRET_PATH_PREFIXES) + r")[^/\s?#\"']+"
)
_SECRET_PARAMETER = re.compile(
    r"([?&;](?:" + "|".join(SECRET_QUERY_PARAMETERS) + r")=)[^&;#\s\"']+", re.IGNORECASE
)
_MARKERS = (*SECRET_PATH_PREFIXES, "=")


def redact(text: str) -> str:
    """``text`` with every credential a URL carries replaced: they never reach a log."""
    if not any(marker in text for marker in _MARKERS):
        return text
    text = _SECRET_PATH.sub(rf"\1{REDACTED}", text)
    return _SECRET_PARAMETER.sub(rf"\1{REDACTED}", text)


def _redacted(value: Any) -> Any:
    """``value`` with every text in it redacted: strings, and the strings inside dicts,
    lists and tuples at any depth (new containers; the caller's are left as they are)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_redacted(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


def _redact_event(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if isinstance(value, str | dict | list | tuple):
            event[key] = _redacted(value)
    return event


class _Redacting:
    """A renderer whose text is redacted once more: on a terminal the console renderer
    formats a traceback itself, after the processors have run. (A class, not a closure:
    uvicorn hands the server's log configuration to its worker processes by pickling.)"""

    def __init__(self, renderer: structlog.typing.Processor) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        rendered = self.renderer(logger, method, event)
        return redact(rendered) if isinstance(rendered, str) else rendered


def _json_bytes(value: Any, **options: Any) -> bytes:
    """One log line's JSON: orjson, or the standard library for what orjson refuses
    (integer keys, integers beyond 64 bits, lone surrogates): a log call never raises."""
    try:
        return orjson.dumps(value, **options)
    except TypeError:  # orjson.JSONEncodeError included
        return json.dumps(value, **options).encode()


def _renderer(on_terminal: bool) -> structlog.typing.Processor:
    return structlog.dev.ConsoleRenderer() if on_terminal else structlog.processors.JSONRenderer()


def configure_logging(level: str = "info") -> None:
    """Signoff's own log lines. Off a terminal each is one JSON object rendered by orjson
    and written as bytes (structlog's fast path: every state change logs a line)."""
    on_terminal = sys.stderr.isatty()
    renderer: structlog.typing.Processor
    factory: Any
    binary = getattr(sys.stderr, "buffer", None)
    if on_terminal or binary is None:
        renderer = _Redacting(_renderer(on_terminal))
        factory = structlog.PrintLoggerFactory(file=sys.stderr)
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_json_bytes)
        factory = structlog.BytesLoggerFactory(file=binary)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *([] if on_terminal else [structlog.processors.format_exc_info]),
            _redact_event,  # last: a formatted traceback may quote a path too
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )


def _server_event(
    _logger: Any, _name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Give the server's own (uvicorn's) plain-text records a stable ``event`` key: one
    ``http.request`` per response with its fields, ``server.log`` with the text for the rest."""
    record = event_dict.get("_record")
    if record is None:
        return event_dict
    args = event_dict.pop("positional_args", None)
    if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
        client, method, path, http_version, status = args
        event_dict.update(
            event="http.request",
            client=client,
            method=method,
            path=path,
            http_version=http_version,
            status=status,
        )
    else:
        event_dict["message"] = event_dict.get("event")
        event_dict["event"] = "server.log"
    return event_dict


def server_log_config(level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn: its lines become structured log lines
    like Signoff's own (JSON when not on a terminal), on stderr."""
    on_terminal = sys.stderr.isatty()
    numeric = logging.getLevelNamesMapping()[level.upper()]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structured": {
                "()": structlog.stdlib.ProcessorFormatter,
                "pass_foreign_args": True,
                "foreign_pre_chain": [
                    structlog.stdlib.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    _server_event,
                    _redact_event,  # uvicorn's request lines carry tokens in paths and queries
                ],
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *([] if on_terminal else [structlog.processors.format_exc_info]),
                    _redact_event,
                    _Redacting(_renderer(on_terminal)),
                ],
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "structured",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": numeric, "propagate": False},
            "uvicorn.error": {"level": numeric},
            "uvicorn.access": {"handlers": ["stderr"], "level": numeric, "propagate": False},
        },
    }
