"""What chat doors still have to show, and how far each has read the outbox.

Statements, by name: :func:`read_cursor` (locked on PostgreSQL: one process fans out at a
time), :func:`save_cursor`, :func:`insert_delivery`, :func:`due_deliveries`,
:func:`take_delivery` (a conditional update: one process attempts a delivery at a time),
:func:`mark_attempted` (a post is about to be sent), :func:`finish_delivery`,
:func:`skip_delivery`, :func:`retry_delivery`, :func:`notice_due`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.store.catchup import Position
from signoff.store.tables import chat_cursors, chat_deliveries

D = chat_deliveries.c
K = chat_cursors.c

PENDING, DONE, SKIPPED = "PENDING", "DONE", "SKIPPED"


async def read_cursor(conn: AsyncConnection, door: str) -> tuple[bool, Position | None]:
    """Whether the door has a cursor, and its position (``None``: before every event)."""
    statement = select(K.position, K.created_at, K.event_id).where(K.door == door)
    if conn.dialect.name == "postgresql":
        statement = statement.with_for_update()
    row = (await conn.execute(statement)).first()
    if row is None:
        return False, None
    if row[0] is None:
        return True, None
    return True, Position(row[0], row[1], row[2])


async def save_cursor(
    conn: AsyncConnection, door: str, position: Position | None, *, exists: bool, now: datetime
) -> None:
    values = {
        "position": position.order if position else None,
        "created_at": position.created_at if position else None,
        "event_id": position.event_id if position else None,
        "updated_at": now,
    }
    if exists:
        await conn.execute(update(chat_cursors).where(K.door == door).values(**values))
    else:
        await conn.execute(insert(chat_cursors).values(door=door, **values))


async def insert_delivery(
    conn: AsyncConnection,
    *,
    door: str,
    task_id: uuid.UUID,
    kind: str,
    channel: str,
    ts: str | None,
    now: datetime,
    due: datetime | None = None,
) -> None:
    """A delivery to attempt at ``due`` (default: at once)."""
    await conn.execute(
        insert(chat_deliveries).values(
            id=uuid.uuid4(),
            door=door,
            task_id=task_id,
            kind=kind,
            channel=channel,
            ts=ts,
            status=PENDING,
            attempts=0,
            next_attempt_at=due or now,
            created_at=now,
        )
    )


async def due_deliveries(
    conn: AsyncConnection, door: str, now: datetime, limit: int
) -> Sequence[dict[str, Any]]:
    rows = await conn.execute(
        select(chat_deliveries)
        .where(D.door == door, D.status == PENDING, D.next_attempt_at <= now)
        .order_by(D.next_attempt_at, D.created_at)
        .limit(limit)
    )
    return [dict(row._mapping) for row in rows]


async def take_delivery(
    conn: AsyncConnection, delivery_id: uuid.UUID, seen: datetime, until: datetime
) -> bool:
    """Hold a due delivery until ``until`` (the attempt's lease); ``False``: another
    process took it first."""
    taken = await conn.execute(
        update(chat_deliveries)
        .where(D.id == delivery_id, D.status == PENDING, D.next_attempt_at == seen)
        .values(next_attempt_at=until)
    )
    return bool(taken.rowcount)


async def mark_attempted(conn: AsyncConnection, delivery_id: uuid.UUID, *, at: datetime) -> None:
    await conn.execute(update(chat_deliveries).where(D.id == delivery_id).values(attempted_at=at))


async def finish_delivery(
    conn: AsyncConnection, delivery_id: uuid.UUID, *, ts: str | None, now: datetime
) -> None:
    await conn.execute(
        update(chat_deliveries)
        .where(D.id == delivery_id)
        .values(status=DONE, done_at=now, ts=ts, last_error=None)
    )


async def skip_delivery(
    conn: AsyncConnection, delivery_id: uuid.UUID, *, reason: str, now: datetime
) -> None:
    await conn.execute(
        update(chat_deliveries)
        .where(D.id == delivery_id)
        .values(status=SKIPPED, done_at=now, last_error=reason[:500])
    )


async def retry_delivery(
    conn: AsyncConnection,
    delivery_id: uuid.UUID,
    *,
    at: datetime,
    error: str,
    not_posted: bool = False,
) -> None:
    """Try again at ``at``; ``not_posted``: the chat system answered that the post was
    not made, so no attempt is outstanding."""
    values: dict[str, Any] = {
        "next_attempt_at": at,
        "last_error": error[:500],
        "attempts": D.attempts + 1,
    }
    if not_posted:
        values["attempted_at"] = None
    await conn.execute(update(chat_deliveries).where(D.id == delivery_id).values(**values))


async def notice_due(conn: AsyncConnection, door: str, channel: str) -> datetime | None:
    """When the notices waiting for ``channel`` (a person) are due: a notice joins them."""
    statement = select(func.min(D.next_attempt_at)).where(
        D.door == door, D.channel == channel, D.status == PENDING, D.kind.like("n:%")
    )
    due: datetime | None = (await conn.execute(statement)).scalar()
    return due
