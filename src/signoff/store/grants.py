"""Remembered approvals (:mod:`signoff.domain.grants`): kept, listed, revoked, and the one
indexed read an escalation with a subject makes (``ix_approval_grants_live``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.grants import Grant
from signoff.domain.states import Action, transition
from signoff.domain.tasks import Task
from signoff.store.tables import approval_grants, review_tasks
from signoff.store.tasks import status_in, update_task_if

G = approval_grants.c
#: How many candidates the escalation's read considers (digest grants first).
CANDIDATES = 5


def _grant(row: Any) -> Grant:
    return Grant(**{name: row._mapping[name] for name in G.keys()})  # noqa: SIM118


async def insert_grant(conn: AsyncConnection, grant: Grant) -> None:
    await conn.execute(
        approval_grants.insert().values(
            {name: getattr(grant, name) for name in G.keys()}  # noqa: SIM118
        )
    )


async def live_candidates(
    conn: AsyncConnection,
    *,
    producer_id: str,
    entity_type: str,
    reason_code: str,
    digest: str,
    now: datetime,
) -> list[Grant]:
    """The live grants that may cover an escalation, digest grants first: one indexed
    read. Locked (shared) on PostgreSQL so a revocation waits for the escalation that uses
    the grant, or the escalation sees it revoked."""
    statement = (
        select(approval_grants)
        .where(
            G.producer_id == producer_id,
            G.entity_type == entity_type,
            G.reason_code == reason_code,
            G.revoked_at.is_(None),
            G.expires_at > now,
            (G.digest == digest) | G.digest.is_(None),
        )
        .order_by(G.digest.is_(None), G.created_at)
        .limit(CANDIDATES)
    )
    if conn.dialect.name == "postgresql":
        statement = statement.with_for_update(read=True)
    return [_grant(row) for row in (await conn.execute(statement)).fetchall()]


async def note_use(conn: AsyncConnection, grant_id: uuid.UUID) -> None:
    await conn.execute(update(approval_grants).where(G.id == grant_id).values(uses=G.uses + 1))


async def list_grants(conn: AsyncConnection, *, limit: int = 500) -> list[Grant]:
    """Newest first."""
    statement = select(approval_grants).order_by(G.created_at.desc(), G.id).limit(limit)
    return [_grant(row) for row in (await conn.execute(statement)).fetchall()]


async def find_grant(conn: AsyncConnection, grant_id: uuid.UUID) -> Grant | None:
    row = (await conn.execute(select(approval_grants).where(G.id == grant_id))).first()
    return _grant(row) if row is not None else None


async def revoke_grant(
    conn: AsyncConnection, grant_id: uuid.UUID, *, by: str, now: datetime
) -> Grant | None:
    """Revoke a live grant; ``None`` when there is none (unknown, or already revoked)."""
    statement = (
        update(approval_grants)
        .where(G.id == grant_id, G.revoked_at.is_(None))
        .values(revoked_at=now, revoked_by=by)
        .returning(approval_grants)
    )
    row = (await conn.execute(statement)).first()
    return _grant(row) if row is not None else None


async def approve_with(
    conn: AsyncConnection, task_id: uuid.UUID, values: dict[str, Any], now: datetime
) -> Task | None:
    """A task just escalated (pending, in this transaction), approved by a grant."""
    conditions = [review_tasks.c.id == task_id, status_in(transition(Action.APPLY_GRANT).sources)]
    return await update_task_if(conn, conditions, values, now=now)
