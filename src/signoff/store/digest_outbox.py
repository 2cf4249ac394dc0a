"""Queries for digests: notifications held for a person until their digest's interval
ends, and their gathering into one ``digest`` row of the notification outbox."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.tasks import Task
from signoff.store.tables import notifications, resume_tokens, review_tasks
from signoff.store.tasks import task_from_row

N = notifications.c
R = resume_tokens.c
HELD = "HELD"
DIGESTED = "DIGESTED"


async def held_until(conn: AsyncConnection, principal_id: str) -> datetime | None:
    """When the person's open digest is due (``None``: nothing held for them)."""
    statement = select(func.min(N.next_attempt_at)).where(
        N.principal_id == principal_id, N.status == HELD
    )
    due: datetime | None = (await conn.execute(statement)).scalar()
    return due


async def people_with_due_digests(conn: AsyncConnection, *, now: datetime, limit: int) -> list[str]:
    """People whose held notifications are due, a read (an idle notifier writes nothing)."""
    statement = (
        select(N.principal_id)
        .where(N.status == HELD, N.next_attempt_at <= now)
        .group_by(N.principal_id)
        .order_by(func.min(N.next_attempt_at))
        .limit(limit)
    )
    return [row.principal_id for row in await conn.execute(statement)]


async def lock_held(conn: AsyncConnection, principal_id: str) -> list[dict[str, Any]]:
    """Everything held for the person, oldest first, locked (PostgreSQL) while gathered."""
    statement = (
        select(notifications)
        .where(N.principal_id == principal_id, N.status == HELD)
        .order_by(N.created_at, N.id)
        .with_for_update()
    )
    return [dict(row._mapping) for row in await conn.execute(statement)]


async def mark_digested(
    conn: AsyncConnection, ids: Sequence[uuid.UUID], digest_id: uuid.UUID
) -> int:
    """Held rows become part of the digest (their token moves to it); returns how many
    were still held (fewer: another notifier gathered them first)."""
    rows = await conn.execute(
        update(notifications)
        .where(N.id.in_(list(ids)), N.status == HELD)
        .values(status=DIGESTED, digest_id=digest_id, resume_token=None)
        .returning(N.id)
    )
    return len(rows.all())


async def tasks_by_id(conn: AsyncConnection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Task]:
    rows = await conn.execute(select(review_tasks).where(review_tasks.c.id.in_(list(ids))))
    return {task.id: task for task in map(task_from_row, rows)}


async def withdrawn_links(
    conn: AsyncConnection, token_hashes: Sequence[str], *, now: datetime
) -> set[str]:
    """Of these resume tokens, those withdrawn (a reassignment, expiry, cancellation) or
    past their time."""
    if not token_hashes:
        return set()
    statement = select(R.token_hash).where(
        R.token_hash.in_(list(token_hashes)), or_(R.revoked_at.is_not(None), R.expires_at <= now)
    )
    return {row.token_hash for row in await conn.execute(statement)}
