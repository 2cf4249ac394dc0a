"""Whether a database failure means "the database is not there (for now)" rather than a
bug, and why: the one classification of database failures. The API answers an outage
with 503 ``ERR_NOT_READY`` and the cause's message, the background loops log it once,
and the driver's own log lines become one line each; anything else stays an error."""

from __future__ import annotations

import errno
import logging
import sqlite3
from dataclasses import dataclass
from enum import StrEnum

import asyncpg
import structlog
from asyncpg.exceptions import InternalClientError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

#: Every kind of exception a database failure can surface as, from SQLAlchemy, asyncpg
#: (the hot path's single statements), sqlite3 (SQLite's thread) or the network: what
#: the API hands to :func:`classify` before anything else sees it.
DATABASE_ERRORS: tuple[type[Exception], ...] = (
    DBAPIError,
    PoolTimeout,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    InternalClientError,  # e.g. "cannot switch to state 12" when a restart cuts a statement
    sqlite3.Error,
    OSError,
)

#: SQLSTATE classes that mean the database is not available to us, not a bad query:
#: connection exception, invalid authorisation (a database being recreated), invalid
#: catalog (no such database), insufficient resources, operator intervention (shutdown,
#: crash recovery, admin kill).
UNAVAILABLE_SQLSTATE_PREFIXES = ("08", "28", "3D", "53", "57P")


class Cause(StrEnum):
    """Why the database cannot serve a request now."""

    CONNECTION_LOST = "connection_lost"
    UNREACHABLE = "unreachable"
    RESTARTING = "restarting"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    DISK_FULL = "disk_full"
    BUSY = "busy"
    POOL_EXHAUSTED = "pool_exhausted"
    UNAVAILABLE = "unavailable"


#: What a client is told for each cause (always a 503 with ``Retry-After``).
MESSAGES = {
    Cause.CONNECTION_LOST: "the database connection was lost; retry",
    Cause.UNREACHABLE: "the database is not reachable; retry shortly",
    Cause.RESTARTING: "the database is restarting; retry shortly",
    Cause.TOO_MANY_CONNECTIONS: "the database has no connection to spare; retry shortly",
    Cause.DISK_FULL: "the database's disk is full; nothing was written, retry later",
    Cause.BUSY: "the database is busy with other writes; retry shortly",
    Cause.POOL_EXHAUSTED: "the service is overloaded; retry shortly",
    Cause.UNAVAILABLE: "the database is not available; retry shortly",
}


@dataclass(frozen=True)
class Outage:
    cause: Cause
    error: str
    """The driver's own words, one line (for the log)."""

    @property
    def message(self) -> str:
        return MESSAGES[self.cause]


def classify(exc: BaseException) -> Outage | None:
    """Why ``exc`` (or what it wraps) says the database cannot serve now, or ``None`` when
    it is not an outage (a bug, a bad query)."""
    found: Cause | None = None
    for link in _chain(exc):
        cause = _cause_of(link)
        if cause is not None and (found is None or found is Cause.CONNECTION_LOST):
            found = cause  # a more precise cause deeper in the chain wins
    if found is None:
        return None
    return Outage(found, _one_line(exc))


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (see :func:`classify`)."""
    return classify(exc) is not None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, what it wraps (SQLAlchemy's ``orig``, ``__cause__``) and, for an exception
    group, its members' chains."""
    links: list[BaseException] = []
    pending = [exc]
    while pending and len(links) < 16:
        link = pending.pop(0)
        if any(link is seen for seen in links):
            continue
        links.append(link)
        if isinstance(link, BaseExceptionGroup):
            pending.extend(link.exceptions)
        orig = getattr(link, "orig", None)
        if isinstance(orig, BaseException):
            pending.append(orig)
        if link.__cause__ is not None:
            pending.append(link.__cause__)
    return links


def _cause_of(exc: BaseException) -> Cause | None:
    if isinstance(exc, DBAPIError):
        return Cause.CONNECTION_LOST if exc.connection_invalidated else None
    if isinstance(exc, PoolTimeout):
        return Cause.POOL_EXHAUSTED
    if isinstance(exc, sqlite3.Error):
        return _sqlite_cause(exc)
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if isinstance(sqlstate, str) and sqlstate.startswith(UNAVAILABLE_SQLSTATE_PREFIXES):
        return _sqlstate_cause(sqlstate)
    if isinstance(exc, asyncpg.InterfaceError | InternalClientError):
        return Cause.CONNECTION_LOST
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return Cause.DISK_FULL
        if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return Cause.CONNECTION_LOST
        return Cause.UNREACHABLE
    return None


def _sqlstate_cause(sqlstate: str) -> Cause:
    if sqlstate in ("53300", "53400"):  # too_many_connections, configuration_limit_exceeded
        return Cause.TOO_MANY_CONNECTIONS
    if sqlstate == "53100":
        return Cause.DISK_FULL
    if sqlstate.startswith("57P"):  # admin shutdown, crash shutdown, cannot connect now
        return Cause.RESTARTING
    if sqlstate.startswith("08"):
        return Cause.CONNECTION_LOST
    return Cause.UNAVAILABLE


def _sqlite_cause(exc: sqlite3.Error) -> Cause | None:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    if name.startswith("SQLITE_FULL") or "database or disk is full" in text:
        return Cause.DISK_FULL
    if not isinstance(exc, sqlite3.OperationalError):
        return None
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return Cause.BUSY  # past the busy timeout
    return Cause.UNAVAILABLE  # the file cannot be opened or read (lite.py)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class _DriverLogs(logging.Handler):
    """asyncpg's pool and SQLAlchemy's pool log a failed reconnection or reset with a
    multi-line traceback: each such record becomes one structured line with the
    classified cause instead."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        outage = classify(exc) if exc is not None else None
        structlog.get_logger("signoff.database").warning(
            "database.driver",
            logger=record.name,
            message=record.getMessage()[:300],
            cause=outage.cause if outage else None,
            error=_one_line(exc) if exc is not None else None,
        )


_DRIVER_LOGS = _DriverLogs(logging.WARNING)


def quiet_driver_logs() -> None:
    """Route the database drivers' own log lines through :class:`_DriverLogs` (once per
    process)."""
    for name in ("asyncpg", "sqlalchemy.pool"):
        logger = logging.getLogger(name)
        if _DRIVER_LOGS not in logger.handlers:
            logger.addHandler(_DRIVER_LOGS)
            logger.propagate = False
