"""What the queries and the write paths use of the runtime, as protocols.

The runtime's :class:`~signoff.store.runtime.database.Database` and
:class:`~signoff.store.runtime.database.UnitOfWork` satisfy them; the modules that only
*use* a database (the audit trail, the single statements, the engines' write paths)
name these and never the runtime's classes, so the runtime may build its write path
from them without an import circle.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

R = TypeVar("R")


class Unit(Protocol):
    """One open transaction, and what its commit is to wake."""

    connection: AsyncConnection
    wrote_outbox: bool
    """Set by whoever appends to the outbox."""
    changed_tasks: set[uuid.UUID]
    """Tasks this transaction changed."""

    async def commit(self) -> None: ...


class Statements(Protocol):
    """Runs one PostgreSQL statement as a whole transaction (the hot path's pool)."""

    async def one_statement(self, sql: str, *args: Any) -> list[Any]: ...


class Escalations(Protocol):
    """Writes one escalation's statement, possibly committed with others."""

    async def escalate(self, values: Mapping[str, Any]) -> Mapping[str, Any]: ...


class WritingDatabase(Statements, Protocol):
    """What the engines' write paths (:mod:`signoff.store.writes`) use of the database."""

    @property
    def dialect(self) -> str: ...

    @property
    def sqlite_file(self) -> str | None: ...

    @property
    def escalations(self) -> Escalations: ...

    def transaction(self, *, write: bool = True) -> AbstractAsyncContextManager[Unit]: ...

    def after_commit(self, task_ids: Iterable[uuid.UUID], *, wrote_outbox: bool) -> None: ...

    async def sqlite_script(self, script: Callable[[sqlite3.Connection], R]) -> R: ...
