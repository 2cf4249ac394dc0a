"""Engines and the unit of work.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and every write
transaction starts with ``BEGIN IMMEDIATE`` so two writers queue on SQLite's own lock
instead of failing half-way with ``database is locked``. There is deliberately no
process-wide lock in Python: it would hide the races that appear with several processes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from signoff.settings import Settings, async_database_url
from signoff.store.changes import TaskChanges

_WRITE = "signoff_write"


def create_engine(settings: Settings) -> AsyncEngine:
    """An async engine for ``settings.database_url`` (SQLite or PostgreSQL)."""
    url = async_database_url(settings.database_url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url, busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    return create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=False)


def _sqlite_engine(url: str, *, busy_timeout_ms: int) -> AsyncEngine:
    engine = create_async_engine(
        url, connect_args={"timeout": busy_timeout_ms / 1000}, pool_size=8, max_overflow=24
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, True)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


class UnitOfWork:
    """One database transaction. It rolls back on exit unless :meth:`commit` was called;
    only services call ``commit``."""

    def __init__(self, connection: AsyncConnection, database: Database) -> None:
        self.connection = connection
        self._database = database
        self._committed = False
        self.wrote_outbox = False
        """Set by whoever appends to the outbox; the commit then wakes this process's
        dispatcher (PostgreSQL also notifies other processes, through a trigger)."""
        self.changed_tasks: set[uuid.UUID] = set()
        """Tasks this transaction changed; the commit wakes their long-poll waiters."""

    @property
    def dialect(self) -> str:
        return self.connection.dialect.name

    async def commit(self) -> None:
        await self.connection.commit()
        self._committed = True
        if self.wrote_outbox:
            self._database.outbox_committed.set()
        if self.changed_tasks:
            self._database.changes.changed(self.changed_tasks)
            for listener in tuple(self._database.change_listeners):
                listener.set()


class Database:
    """Owns the engine; hands out units of work."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.outbox_committed = asyncio.Event()
        self.changes = TaskChanges(_listen_url(engine))
        """This process's change signal (long-poll waiters, the dispatcher's wake-up)."""
        self.change_listeners: set[asyncio.Event] = set()
        """Events set on every commit that changed any task, for in-process listeners of
        every change (the console's live inbox); each clears its own."""

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @asynccontextmanager
    async def transaction(self, *, write: bool = True) -> AsyncIterator[UnitOfWork]:
        """A transaction; ``write=False`` starts a deferred (read) transaction on SQLite."""
        async with self.engine.connect() as connection:
            if self.dialect == "sqlite":
                connection = await connection.execution_options(**{_WRITE: write})
            await connection.begin()
            uow = UnitOfWork(connection, self)
            try:
                yield uow
            finally:
                if not uow._committed and connection.in_transaction():
                    await connection.rollback()

    async def ping(self) -> None:
        """Raises whatever the driver raises when the database does not answer."""
        async with self.transaction(write=False) as uow:
            await uow.connection.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.changes.close()
        await self.engine.dispose()


def _listen_url(engine: AsyncEngine) -> str | None:
    """A plain libpq URL for the shared listener (PostgreSQL only)."""
    if engine.dialect.name != "postgresql":
        return None
    url = engine.url.set(drivername="postgresql")
    return url.render_as_string(hide_password=False)
