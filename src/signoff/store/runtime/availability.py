"""Whether a database failure means "the database is not there (for now)" rather than a
bug: the API answers the first with 503 ``ERR_NOT_READY`` and the background loops log it
once; the second stays an error."""

from __future__ import annotations

import sqlite3

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

#: SQLSTATE classes that mean the database is not available to us, not a bad query:
#: connection exception, invalid authorisation (a database being recreated), invalid
#: catalog (no such database), insufficient resources, operator intervention (shutdown,
#: crash recovery, admin kill).
UNAVAILABLE_SQLSTATE_PREFIXES = ("08", "28", "3D", "53", "57P")


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (SQLAlchemy's, asyncpg's or sqlite3's own on the hot path, or the
    network's) says the database cannot be reached."""
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if isinstance(exc.orig, BaseException) else exc
    if isinstance(exc, OSError | TimeoutError | PoolTimeout | asyncpg.InterfaceError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return True  # locked past the busy timeout, or the file cannot be opened (lite.py)
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(UNAVAILABLE_SQLSTATE_PREFIXES)
