"""Admin-managed documents kept by name (escalation policies, approval rules): one
insert-or-replace for all of them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection


async def upsert_named(
    conn: AsyncConnection,
    table: Table,
    *,
    name: str,
    values: dict[str, Any],
    now: datetime,
    create: bool,
) -> bool:
    """Insert (``create``) or replace the row ``name`` of ``table`` (columns ``name``,
    ``created_at``, ``updated_at`` and ``values``'); False when it already exists (insert)
    or does not (replace)."""
    statement: Any
    if create:
        dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        statement = (
            dialect_insert(table)
            .values(name=name, **values, created_at=now, updated_at=now)
            .on_conflict_do_nothing()
            .returning(table.c.name)
        )
    else:
        statement = (
            update(table)
            .where(table.c.name == name)
            .values(**values, updated_at=now)
            .returning(table.c.name)
        )
    return (await conn.execute(statement)).first() is not None
