"""Queries over the secrets stored encrypted (signoff.crypto): webhook signing secrets and
the resume tokens of unsent notifications."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.store.tables import notifications, webhook_endpoints

E = webhook_endpoints.c
N = notifications.c


async def endpoint_secrets(conn: AsyncConnection) -> Sequence[Any]:
    """Every endpoint's ``id``, ``secret`` and ``previous_secret`` (encrypted)."""
    return (await conn.execute(select(E.id, E.secret, E.previous_secret).with_for_update())).all()


async def set_endpoint_secrets(
    conn: AsyncConnection, endpoint_id: uuid.UUID, *, secret: str, previous_secret: str | None
) -> None:
    await conn.execute(
        update(webhook_endpoints)
        .where(E.id == endpoint_id)
        .values(secret=secret, previous_secret=previous_secret)
    )


async def stored_resume_tokens(conn: AsyncConnection) -> Sequence[Any]:
    """Notifications still holding an (encrypted) resume token: ``id``, ``resume_token``."""
    return (
        await conn.execute(
            select(N.id, N.resume_token).where(N.resume_token.is_not(None)).with_for_update()
        )
    ).all()


async def set_resume_token(
    conn: AsyncConnection, notification_id: uuid.UUID, resume_token: str | None
) -> None:
    await conn.execute(
        update(notifications).where(N.id == notification_id).values(resume_token=resume_token)
    )
