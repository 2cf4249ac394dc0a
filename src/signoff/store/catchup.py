"""The catch-up read: a producer's outbox events, in an order no later commit can enter
behind a reader.

SQLite runs one writer at a time, so the outbox's ``rowid`` grows in commit order. On
PostgreSQL each event keeps the id of the transaction that wrote it (``commit_xid``, a
column default), and only events of transactions older than every one still running
(the snapshot's ``xmin``) are read: a transaction committing later has a larger id, so
it always lands after the cursor. Events of a transaction still open wait for it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, literal, literal_column, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.store.tables import outbox_events, review_tasks

O = outbox_events.c  # noqa: E741
T = review_tasks.c

#: Transactions older than all still running (PostgreSQL): their events are final.
_SETTLED_BELOW = text("(pg_snapshot_xmin(pg_current_snapshot())::text)::bigint")


class ForeignCursor(ValueError):
    """A position of the other engine's kind: not one this database gave."""


@dataclass(frozen=True)
class Position:
    """Where a reader is: SQLite ``(rowid,)``; PostgreSQL ``(xid, created_at, id)``."""

    order: int
    created_at: datetime | None = None
    event_id: uuid.UUID | None = None


async def events_after(
    conn: AsyncConnection, *, producer_id: str, after: Position | None, limit: int
) -> list[tuple[Position, dict[str, Any]]]:
    """Up to ``limit`` outbox events about ``producer_id``'s tasks after ``after``, oldest
    first, each with its position and its payload (the webhook body)."""
    if (after is not None) and ((after.created_at is None) == (conn.dialect.name == "postgresql")):
        raise ForeignCursor(conn.dialect.name)
    mine = T.producer_id == producer_id
    joined = outbox_events.join(review_tasks, T.id == O.task_id)
    if conn.dialect.name == "postgresql":
        statement = (
            select(O.commit_xid, O.created_at, O.id, O.payload)
            .select_from(joined)
            .where(mine, O.commit_xid < _SETTLED_BELOW)
        )
        if after is not None:
            statement = statement.where(
                tuple_(O.commit_xid, O.created_at, O.id)
                > tuple_(
                    literal(after.order, O.commit_xid.type),
                    literal(after.created_at, O.created_at.type),
                    literal(after.event_id, O.id.type),
                )
            )
        statement = statement.order_by(O.commit_xid, O.created_at, O.id).limit(limit)
        rows = await conn.execute(statement)
        return [(Position(r[0], r[1], r[2]), r[3]) for r in rows]
    rowid = literal_column("outbox_events.rowid", Integer)
    statement = select(rowid, O.payload).select_from(joined).where(mine)
    if after is not None:
        statement = statement.where(rowid > after.order)
    rows = await conn.execute(statement.order_by(rowid).limit(limit))
    return [(Position(r[0]), r[1]) for r in rows]
