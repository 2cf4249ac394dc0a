"""Engines and the unit of work.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and every write
transaction starts with ``BEGIN IMMEDIATE`` so two writers queue on SQLite's own lock
instead of failing half-way with ``database is locked``. There is deliberately no
process-wide lock in Python: it would hide the races that appear with several processes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from signoff.settings import Settings, async_database_url
from signoff.store.changes import TaskChanges
from signoff.store.keycache import KeyCache

_WRITE = "signoff_write"


def create_engine(settings: Settings) -> AsyncEngine:
    """An async engine for ``settings.database_url`` (SQLite or PostgreSQL)."""
    url = async_database_url(settings.database_url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url, busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    if settings.pgbouncer:
        # Transaction pooling: a named prepared statement may land on another server
        # connection. SQLAlchemy always runs in a transaction (one server connection), so
        # unique names per statement and no caches are enough.
        return create_async_engine(
            url,
            pool_size=10,
            max_overflow=20,
            connect_args={
                "statement_cache_size": 0,
                "prepared_statement_cache_size": 0,
                "prepared_statement_name_func": lambda: f"__signoff_{uuid.uuid4().hex}__",
            },
        )
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
        self._database.after_commit(self.changed_tasks, wrote_outbox=self.wrote_outbox)


class Database:
    """Owns the engine; hands out units of work. On PostgreSQL it also owns a small
    asyncpg pool for the hot path's single statements (:meth:`one_statement`)."""

    def __init__(
        self, engine: AsyncEngine, *, pgbouncer: bool = False, listen_url: str | None = None
    ) -> None:
        """``listen_url``: where to ``LISTEN`` on PostgreSQL (a direct connection when
        ``engine`` goes through PgBouncer); default: the engine's own database."""
        self.engine = engine
        self.outbox_committed = asyncio.Event()
        listen = _listen_url(engine, listen_url)
        self.changes = TaskChanges(listen)
        """This process's change signal (long-poll waiters, the dispatcher's wake-up)."""
        self.change_listeners: set[asyncio.Event] = set()
        """Events set on every commit that changed any task, for in-process listeners of
        every change (the console's live inbox); each clears its own."""
        self.pgbouncer = pgbouncer
        self.key_cache = KeyCache(listen)
        """Verified API keys (:mod:`signoff.store.keycache`)."""
        self._pool: asyncpg.Pool | None = None
        self._pool_lock: asyncio.Lock | None = None

    def after_commit(self, task_ids: Iterable[uuid.UUID], *, wrote_outbox: bool) -> None:
        """What a commit wakes in this process: the dispatcher (an outbox event), the
        long-poll waiters of the changed tasks and the listeners of every change. Called
        by :meth:`UnitOfWork.commit` and after each single-statement change."""
        if wrote_outbox:
            self.outbox_committed.set()
        task_ids = tuple(task_ids)
        if task_ids:
            self.changes.changed(task_ids)
            for listener in tuple(self.change_listeners):
                listener.set()

    async def _raw_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            if self._pool_lock is None:
                self._pool_lock = asyncio.Lock()
            async with self._pool_lock:
                if self._pool is None:
                    url = self.engine.url.set(drivername="postgresql")
                    self._pool = await asyncpg.create_pool(
                        url.render_as_string(hide_password=False),
                        min_size=1,
                        max_size=10,
                        # PgBouncer 1.18 cannot route named prepared statements.
                        statement_cache_size=0 if self.pgbouncer else 256,
                    )
        return self._pool

    async def one_statement(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Run one statement as a whole transaction (PostgreSQL only) and return its rows.

        The hot path's unit of work: a single data-modifying statement commits or rolls
        back as a whole, so one round trip is the transaction (autocommit). The services
        that call it are still the only code that decides to write. Behind PgBouncer the
        statement runs inside an explicit transaction, which pins one server connection
        between the unnamed statement's parse and its execution.
        """
        pool = await self._raw_pool()
        async with pool.acquire() as connection:
            if self.pgbouncer:
                async with connection.transaction():
                    return list(await connection.fetch(sql, *args))
            return list(await connection.fetch(sql, *args))

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
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        await self.changes.close()
        await self.key_cache.close()
        await self.engine.dispose()


def _listen_url(engine: AsyncEngine, configured: str | None = None) -> str | None:
    """A plain libpq URL for the shared listener (PostgreSQL only)."""
    if engine.dialect.name != "postgresql":
        return None
    if configured:
        return async_database_url(configured).replace("postgresql+asyncpg://", "postgresql://", 1)
    url = engine.url.set(drivername="postgresql")
    return url.render_as_string(hide_password=False)
