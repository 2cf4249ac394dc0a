"""Idempotency keys, scoped to the producer's principal, expiring after a TTL.

Claiming a key is a single upsert: insert it, or take over a row whose TTL has passed;
a live row is left alone and nothing comes back, so the caller replays it. On
PostgreSQL a concurrent claim of the same key waits on the primary key until the first
transaction ends, then sees its committed row: two requests never both create a task.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.store.tables import idempotency_keys

IK = idempotency_keys.c


@dataclass(frozen=True)
class StoredIdempotencyKey:
    request_fingerprint: str
    task_id: uuid.UUID
    response_status: int
    response_body: str
    expires_at: datetime


async def claim_idempotency_key(
    conn: AsyncConnection,
    *,
    producer_id: str,
    key: str,
    fingerprint: str,
    task_id: uuid.UUID,
    response_status: int,
    response_body: str,
    now: datetime,
    expires_at: datetime,
) -> bool:
    """Take the key for this request, storing the response to replay (the escalation's
    response is fully known before its rows are written; if the transaction rolls back,
    the key goes with it). False when a live (unexpired) row holds the key."""
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    values = {
        "producer_id": producer_id,
        "idempotency_key": key,
        "request_fingerprint": fingerprint,
        "task_id": task_id,
        "response_status": response_status,
        "response_body": response_body,
        "created_at": now,
        "expires_at": expires_at,
    }
    proposed = dialect_insert(idempotency_keys).values(**values)
    statement = proposed.on_conflict_do_update(
        index_elements=[IK.producer_id, IK.idempotency_key],
        set_={
            name: proposed.excluded[name]
            for name in values
            if name not in ("producer_id", "idempotency_key")
        },
        where=IK.expires_at <= now,
    ).returning(IK.producer_id)
    return (await conn.execute(statement)).first() is not None


async def find_idempotency_key(
    conn: AsyncConnection, *, producer_id: str, key: str
) -> StoredIdempotencyKey | None:
    row = (
        await conn.execute(
            select(
                IK.request_fingerprint,
                IK.task_id,
                IK.response_status,
                IK.response_body,
                IK.expires_at,
            ).where(IK.producer_id == producer_id, IK.idempotency_key == key)
        )
    ).first()
    if row is None:
        return None
    return StoredIdempotencyKey(
        request_fingerprint=row.request_fingerprint,
        task_id=row.task_id,
        response_status=row.response_status,
        response_body=row.response_body,
        expires_at=row.expires_at,
    )


async def purge_expired_idempotency_keys(
    conn: AsyncConnection, *, now: datetime, limit: int
) -> int:
    """Delete up to ``limit`` keys whose TTL has passed; returns how many. (Correctness never
    depends on this: an expired key is taken over on reuse. It only bounds the table.)"""
    doomed = (
        select(IK.producer_id, IK.idempotency_key)
        .where(IK.expires_at <= now)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    rows = (await conn.execute(doomed)).all()
    for row in rows:
        await conn.execute(
            delete(idempotency_keys).where(
                IK.producer_id == row.producer_id,
                IK.idempotency_key == row.idempotency_key,
                IK.expires_at <= now,
            )
        )
    return len(rows)
