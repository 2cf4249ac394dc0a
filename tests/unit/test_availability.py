"""The one classification of database failures (store/runtime/availability.py): what the
drivers raise when the database cannot serve becomes an outage with its cause, anything
else stays an error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg
import pytest
from asyncpg.exceptions import InternalClientError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from signoff.store.runtime.availability import Cause, classify


def _sqlite_full(path: Path) -> sqlite3.Error:
    """A real SQLITE_FULL: the file may not grow past its few pages."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("CREATE TABLE t (x TEXT)")
        connection.execute("PRAGMA max_page_count = 3")
        for _ in range(100):
            try:
                connection.execute("INSERT INTO t VALUES (?)", ("x" * 4000,))
            except sqlite3.Error as exc:
                return exc
        raise AssertionError("the file kept growing")
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (InternalClientError("cannot switch to state 12; another operation is in progress"),
         Cause.CONNECTION_LOST),
        (asyncpg.ConnectionDoesNotExistError("connection was closed"), Cause.CONNECTION_LOST),
        (asyncpg.InterfaceError("connection is closed"), Cause.CONNECTION_LOST),
        (asyncpg.TooManyConnectionsError("sorry, too many clients already"),
         Cause.TOO_MANY_CONNECTIONS),
        (asyncpg.CannotConnectNowError("the database system is shutting down"),
         Cause.RESTARTING),
        (asyncpg.AdminShutdownError("terminating connection"), Cause.RESTARTING),
        (ConnectionRefusedError(111, "Connection refused"), Cause.UNREACHABLE),
        (ConnectionResetError(104, "Connection reset by peer"), Cause.CONNECTION_LOST),
        (OSError(28, "No space left on device"), Cause.DISK_FULL),
        (PoolTimeout("QueuePool limit reached"), Cause.POOL_EXHAUSTED),
        (sqlite3.OperationalError("database is locked"), Cause.BUSY),
        (ExceptionGroup("a group", [ConnectionRefusedError(111, "refused")]), Cause.UNREACHABLE),
    ],
)  # fmt: skip
def test_outages_are_classified_with_their_cause(exc: BaseException, cause: Cause) -> None:
    outage = classify(exc)
    assert outage is not None
    assert outage.cause is cause
    assert "\n" not in outage.error


def test_a_full_sqlite_file_is_a_full_disk(tmp_path: Path) -> None:
    outage = classify(_sqlite_full(tmp_path / "full.db"))
    assert outage is not None
    assert outage.cause is Cause.DISK_FULL
    assert "disk is full" in outage.message


def test_sqlalchemy_wrapping_keeps_the_precise_cause() -> None:
    invalidated = DBAPIError("SELECT 1", {}, Exception("closed"), connection_invalidated=True)
    assert (outage := classify(invalidated)) is not None
    assert outage.cause is Cause.CONNECTION_LOST
    refused = DBAPIError("SELECT 1", {}, asyncpg.TooManyConnectionsError("too many clients"))
    assert (outage := classify(refused)) is not None
    assert outage.cause is Cause.TOO_MANY_CONNECTIONS
    assert "no connection to spare" in outage.message


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        sqlite3.IntegrityError("UNIQUE constraint failed"),
        asyncpg.UniqueViolationError("duplicate key"),
        DBAPIError("SELECT x", {}, Exception("column x does not exist")),
    ],
)
def test_everything_else_is_not_an_outage(exc: BaseException) -> None:
    assert classify(exc) is None
