"""Engines and the unit of work.

SQLite (the embedded default) runs in WAL mode with a busy timeout, and every write
transaction starts with ``BEGIN IMMEDIATE`` so two writers queue on SQLite's own lock
instead of failing half-way with ``database is locked``. Within one process, write
transactions also queue on an ``asyncio`` lock before they begin: SQLite runs one writer
at a time anyway, and a writer left to SQLite's busy handler sleeps in growing steps (up
to 100 ms a try) while the lock is taken and given back many times in between, which
cost seconds at the 99th percentile with four concurrent requests. Writers in *other*
processes still meet on SQLite's own lock and busy timeout, which is what the
multi-process race tests exercise.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from signoff.domain.evidence import time_text, trail_hash
from signoff.private_files import create_private, sqlite_path
from signoff.settings import Settings, async_database_url
from signoff.store.runtime.announce import Announcer
from signoff.store.runtime.availability import Cause, classify, quiet_driver_logs
from signoff.store.runtime.changes import TaskChanges
from signoff.store.runtime.grouped import MAX_GROUP, EscalationGroups
from signoff.store.runtime.keycache import KeyCache
from signoff.store.runtime.litethread import LiteThread
from signoff.store.writes import TaskWrites
from signoff.store.writes.assemble import task_writes

_WRITE = "signoff_write"
#: After a write failed for a full disk (SQLite), the free space that makes it ready again.
DISK_ROOM_BYTES = 1 << 20
R = TypeVar("R")


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


def open_database(settings: Settings) -> Database:
    """The :class:`Database` every kind of process uses (``serve``, ``worker``, the
    commands, migrations, the demo): its engine and its hot path both follow the
    PgBouncer settings, ``LISTEN`` goes to ``listen_database_url``, escalations are
    grouped by ``escalation_group_size``. The drivers' own log lines become one line each
    (:func:`signoff.store.runtime.availability.quiet_driver_logs`)."""
    quiet_driver_logs()
    return Database(
        create_engine(settings),
        pgbouncer=settings.pgbouncer,
        listen_url=settings.listen_database_url,
        escalation_group_size=settings.escalation_group_size,
    )


def _sqlite_engine(url: str, *, busy_timeout_ms: int) -> AsyncEngine:
    path = sqlite_path(url)
    if path is not None:
        create_private(path)  # before SQLite creates it readable by everyone
    engine = create_async_engine(
        url, connect_args={"timeout": busy_timeout_ms / 1000}, pool_size=8, max_overflow=24
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module so BEGIN is ours.
        dbapi_connection.isolation_level = None
        _sqlite_pragmas(dbapi_connection, busy_timeout_ms)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, True)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    engine.sync_engine.signoff_busy_timeout_ms = busy_timeout_ms  # type: ignore[attr-defined]
    return engine


def sqlite_trail_hash(
    prev: str,
    task_id: str,
    event_type: str,
    action: str,
    status: str,
    version: int,
    actor_id: str,
    actor_role: str,
    created_at: str,
    details: str,
) -> str:
    """:func:`signoff.domain.evidence.trail_hash` over a row as SQLite stores it (the
    task id as 32 hex digits, the time as naive UTC text)."""
    moment = datetime.fromisoformat(created_at).replace(tzinfo=UTC)
    return trail_hash(
        prev,
        str(uuid.UUID(task_id)),
        event_type,
        action,
        status,
        int(version),
        actor_id,
        actor_role,
        time_text(moment),
        details,
    )


def _sqlite_pragmas(connection: Any, busy_timeout_ms: int) -> None:
    """What every SQLite connection of Signoff's runs first."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.close()
    # The trail's hash chain: the trigger of migration 0021 calls it on every insert.
    connection.create_function("signoff_trail_hash", 10, sqlite_trail_hash, deterministic=True)


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
        self,
        engine: AsyncEngine,
        *,
        pgbouncer: bool = False,
        listen_url: str | None = None,
        escalation_group_size: int = MAX_GROUP,
    ) -> None:
        """``listen_url``: where to ``LISTEN`` on PostgreSQL (a direct connection when
        ``engine`` goes through PgBouncer); default: the engine's own database.
        ``escalation_group_size``: the most escalations committed together on PostgreSQL
        (:mod:`signoff.store.runtime.grouped`; 1: each alone)."""
        self.engine = engine
        self.outbox_committed = asyncio.Event()
        listen = None if pgbouncer and not listen_url else _listen_url(engine, listen_url)
        self.changes = TaskChanges(listen)
        """This process's change signal (long-poll waiters, the dispatcher's wake-up)."""
        self.change_listeners: set[asyncio.Event] = set()
        """Events set on every commit that changed any task, for in-process listeners of
        every change (the console's live inbox); each clears its own."""
        self.pgbouncer = pgbouncer
        self.key_cache = KeyCache(listen)
        """Verified API keys (:mod:`signoff.store.runtime.keycache`)."""
        self._pool: asyncpg.Pool | None = None
        self.escalations = EscalationGroups(self.one_statement, size=escalation_group_size)
        """This process's escalations on PostgreSQL, committed in groups."""
        self._pool_lock: asyncio.Lock | None = None
        self.disk_full = False
        """A write of this process failed because the disk (SQLite's file) is full; until a
        write succeeds again, :meth:`ping` checks with a write of its own."""
        self._sqlite_writer = asyncio.Lock()
        self._lite: LiteThread | None = None
        self.announcer = Announcer(self._run_script) if listen is not None else None
        """Tells other processes what this one committed (PostgreSQL;
        :mod:`signoff.store.runtime.announce`)."""
        self.writes: TaskWrites = task_writes(self)
        """This engine's write path for the state changes of tasks
        (:mod:`signoff.store.writes`), chosen once."""

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
            if self.announcer is not None:
                self.announcer.announce(task_ids)

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
                        reset=_keep_session,
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
    def sqlite_file(self) -> str | None:
        """The SQLite database file, when there is one (not in memory): what
        :meth:`sqlite_script` needs."""
        if self.dialect != "sqlite":
            return None
        name = self.engine.url.database
        if not name or name == ":memory:" or name.startswith("file:"):
            return None
        return name

    async def sqlite_script(self, script: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``script`` — a whole write transaction, ``BEGIN IMMEDIATE`` to ``COMMIT`` —
        on this process's own SQLite connection, in its thread, grouped with the scripts
        that wait alongside it (:mod:`signoff.store.runtime.litethread`). A group queues with
        every other write transaction of the process, as :meth:`transaction` does."""
        with self._noting_failures():
            return await self._lite_thread().run(script)

    async def run_write(self, work: Callable[[AsyncConnection], Awaitable[R]]) -> R:
        """Run ``work`` — store functions that await nothing but ``conn.execute`` — as one
        write transaction in this process's SQLite thread, grouped like
        :meth:`sqlite_script` (:meth:`signoff.store.runtime.litethread.LiteThread.run_core`).
        Without a SQLite file (PostgreSQL, or SQLite in memory) it runs in an ordinary
        write transaction."""
        if self.sqlite_file is None:
            async with self.transaction() as uow:
                value = await work(uow.connection)
                await uow.commit()
                return value
        with self._noting_failures():
            return await self._lite_thread().run_core(work)

    async def run_read(self, work: Callable[[AsyncConnection], Awaitable[R]]) -> R:
        """Like :meth:`run_write`, for a read: on a SQLite file one trip to its thread
        (where it queues with the writes), elsewhere a read transaction."""
        if self.sqlite_file is None:
            async with self.transaction(write=False) as uow:
                return await work(uow.connection)
        return await self._lite_thread().run_core(work, write=False)

    def _lite_thread(self) -> LiteThread:
        if self._lite is None:
            path = self.sqlite_file
            if path is None:
                raise RuntimeError("the SQLite thread needs a SQLite database file")
            self._lite = LiteThread(lambda: self._connect_sqlite(path), self._writer_turn)
        return self._lite

    @asynccontextmanager
    async def _writer_turn(self) -> AsyncIterator[None]:
        """This process's SQLite writer turn, waited for at most the busy timeout (then
        the same error SQLite gives a writer it cannot let in: 503 to the client)."""
        seconds = int(getattr(self.engine.sync_engine, "signoff_busy_timeout_ms", 10_000)) / 1000
        try:
            async with asyncio.timeout(seconds):
                await self._sqlite_writer.acquire()
        except TimeoutError:
            raise sqlite3.OperationalError(
                "database is locked (waited for this process's other writers)"
            ) from None
        try:
            yield
        finally:
            self._sqlite_writer.release()

    def _connect_sqlite(self, path: str) -> sqlite3.Connection:
        timeout_ms = int(getattr(self.engine.sync_engine, "signoff_busy_timeout_ms", 10_000))
        connection = sqlite3.connect(
            path, timeout=timeout_ms / 1000, isolation_level=None, check_same_thread=False
        )
        _sqlite_pragmas(connection, timeout_ms)
        return connection

    async def _run_script(self, sql: str) -> None:
        """Run ``sql`` (whole statements, no parameters) on the hot path's pool."""
        pool = await self._raw_pool()
        async with pool.acquire() as connection:
            await connection.execute(sql)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @asynccontextmanager
    async def transaction(self, *, write: bool = True) -> AsyncIterator[UnitOfWork]:
        """A transaction; ``write=False`` starts a deferred (read) transaction on SQLite."""
        if write and self.dialect == "sqlite":
            with self._noting_failures():
                async with self._writer_turn(), self._transaction(write=True) as uow:
                    yield uow
            return
        async with self._transaction(write=write) as uow:
            yield uow

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[UnitOfWork]:
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

    @contextmanager
    def _noting_failures(self) -> Iterator[None]:
        """Remember a write refused for a full disk (see :attr:`disk_full`)."""
        try:
            yield
        except Exception as exc:
            outage = classify(exc)
            if outage is not None and outage.cause is Cause.DISK_FULL:
                self.disk_full = True
            raise

    async def ping(self) -> None:
        """Raises whatever the driver raises when the database does not answer, or (SQLite,
        after a write failed for a full disk) cannot write yet."""
        path = self.sqlite_file
        if self.disk_full and path is not None:
            await self.sqlite_script(lambda connection: _write_probe(connection, path))
            self.disk_full = False
            return
        async with self.transaction(write=False) as uow:
            await uow.connection.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.escalations.close()
        if self.announcer is not None:
            await self.announcer.drain()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._lite is not None:
            await self._lite.close()
            self._lite = None
        await self.changes.close()
        await self.key_cache.close()
        await self.engine.dispose()


def _write_probe(connection: sqlite3.Connection, path: str) -> None:
    """Whether SQLite can write again after a full disk: room to spare beside the file (a
    small write may well fit where the one that failed did not), then the smallest write
    there is, the file's header page written again unchanged."""
    folder = os.statvfs(os.path.dirname(os.path.abspath(path)))
    if folder.f_bavail * folder.f_frsize < DISK_ROOM_BYTES:
        raise sqlite3.OperationalError("database or disk is full")
    connection.execute("BEGIN IMMEDIATE")
    try:
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        connection.execute(f"PRAGMA user_version = {int(version)}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:  # a failed COMMIT may have rolled back already
            connection.execute("ROLLBACK")
        raise


async def _keep_session(_connection: asyncpg.Connection) -> None:
    """The hot-path pool's reset on release: none. Its statements are single autocommit
    statements and whole-transaction scripts whose locks and settings are transaction
    scoped, so a connection comes back as it left; asyncpg's default reset (``RESET ALL``,
    ``UNLISTEN *``, … — an extra round trip per statement) has nothing to undo. An open
    transaction is still rolled back by asyncpg before this is called."""


def _listen_url(engine: AsyncEngine, configured: str | None = None) -> str | None:
    """A plain libpq URL for the shared listener (PostgreSQL only)."""
    if engine.dialect.name != "postgresql":
        return None
    if configured:
        return async_database_url(configured).replace("postgresql+asyncpg://", "postgresql://", 1)
    url = engine.url.set(drivername="postgresql")
    return url.render_as_string(hide_password=False)
