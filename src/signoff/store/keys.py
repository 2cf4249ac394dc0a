"""API keys: stored as SHA-256 of the secret, never the secret itself."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.store.runtime.keycache import CHANNEL as KEY_CHANNEL
from signoff.store.tables import api_keys

K = api_keys.c


async def insert_api_key(
    conn: AsyncConnection,
    *,
    key_id: uuid.UUID,
    key_hash: str,
    role: Role,
    principal_id: str,
    now: datetime,
    groups: list[str] | None = None,
    email: str | None = None,
) -> None:
    await conn.execute(
        insert(api_keys).values(
            id=key_id,
            key_hash=key_hash,
            role=role.value,
            principal_id=principal_id,
            created_at=now,
            groups=groups or [],
            email=email,
        )
    )


async def find_principal_by_key_hash(conn: AsyncConnection, key_hash: str) -> Principal | None:
    """The live (unrevoked) key with this hash, as a principal."""
    return await _live_principal(conn, K.key_hash == key_hash)


async def find_live_principal(conn: AsyncConnection, key_id: uuid.UUID) -> Principal | None:
    """The key with this id as a principal, while it is live (not revoked)."""
    return await _live_principal(conn, K.id == key_id)


async def _live_principal(conn: AsyncConnection, which: Any) -> Principal | None:
    row = (
        await conn.execute(
            select(K.id, K.principal_id, K.role, K.groups).where(which, K.revoked_at.is_(None))
        )
    ).first()
    if row is None:
        return None
    return Principal(
        key_id=row.id,
        principal_id=row.principal_id,
        role=Role(row.role),
        groups=tuple(row.groups or ()),
    )


async def principal_has_keys(conn: AsyncConnection, principal_id: str) -> bool:
    """Whether any API key (live or revoked) was ever issued to ``principal_id``."""
    row = (await conn.execute(select(K.id).where(K.principal_id == principal_id).limit(1))).first()
    return row is not None


async def revoke_api_key(conn: AsyncConnection, key_id: uuid.UUID, now: datetime) -> str | None:
    """Revoke a live key; its hash, or None when no live key has this id. On PostgreSQL
    the same transaction notifies every process's key cache (``signoff_api_keys``)."""
    result = await conn.execute(
        update(api_keys)
        .where(K.id == key_id, K.revoked_at.is_(None))
        .values(revoked_at=now)
        .returning(K.key_hash)
    )
    row = result.first()
    if row is None:
        return None
    await notify_key_changed(conn, row.key_hash)
    return str(row.key_hash)


async def notify_key_changed(conn: AsyncConnection, key_hash: str) -> None:
    """Tell every process's key cache (PostgreSQL: delivered when the transaction commits)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(func.pg_notify(KEY_CHANNEL, key_hash)))


async def key_hash_exists(conn: AsyncConnection, key_hash: str) -> bool:
    return (await conn.execute(select(K.id).where(K.key_hash == key_hash))).first() is not None


async def any_live_admin_key(conn: AsyncConnection) -> bool:
    statement = select(K.id).where(K.role == Role.ADMIN.value, K.revoked_at.is_(None)).limit(1)
    return (await conn.execute(statement)).first() is not None


async def list_api_keys(conn: AsyncConnection) -> Sequence[dict[str, Any]]:
    rows = await conn.execute(select(api_keys).order_by(K.created_at, K.id))
    return [
        {
            "id": str(row.id),
            "role": row.role,
            "principal_id": row.principal_id,
            "groups": row.groups or [],
            "email": row.email,
            "created_at": row.created_at,
            "revoked_at": row.revoked_at,
        }
        for row in rows
    ]


async def restore_bootstrap_key(conn: AsyncConnection, key_hash: str) -> None:
    """Make the configured bootstrap key a live admin key again."""
    await conn.execute(
        update(api_keys)
        .where(K.key_hash == key_hash)
        .values(role=Role.ADMIN.value, revoked_at=None)
    )
    await notify_key_changed(conn, key_hash)
