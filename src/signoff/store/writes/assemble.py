"""The one place that chooses an engine's write path."""

from __future__ import annotations

from signoff.store.protocols import WritingDatabase
from signoff.store.writes import TaskWrites
from signoff.store.writes.postgres import PostgresWrites
from signoff.store.writes.sqlite import SqliteWrites


def task_writes(database: WritingDatabase) -> TaskWrites:
    """``database``'s write path for the state changes of tasks: PostgreSQL's single
    statements, or SQLite's scripts and transactions (its escalations go through the
    SQLite thread only when the database is a file)."""
    if database.dialect == "postgresql":
        return PostgresWrites(database)
    return SqliteWrites(database, thread=database.sqlite_file is not None)
