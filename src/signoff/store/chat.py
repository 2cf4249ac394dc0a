"""Chat doors' rows: the cards posted for tasks and the chat user behind each action.

Statements, by name: :func:`record_card` (a card posted or redrawn),
:func:`cards_of_task`, :func:`card_at` (the card a message shows), :func:`record_action`
(the chat user behind a decision; the door of a decision is in its audit event).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.store.tables import chat_actions, chat_cards

C = chat_cards.c
A = chat_actions.c
#: The outcome of an action that reached a decision or a vote.
RECORDED = "recorded"


async def record_card(
    conn: AsyncConnection,
    *,
    door: str,
    task_id: uuid.UUID,
    channel: str,
    ts: str,
    revision: int | None,
    now: datetime,
) -> None:
    """A card posted (a new row) or redrawn (the row of its message updated)."""
    drawn = await conn.execute(
        update(chat_cards)
        .where(C.door == door, C.channel == channel, C.ts == ts)
        .values(revision=revision, drawn_at=now, task_id=task_id)
    )
    if drawn.rowcount:
        return
    await conn.execute(
        insert(chat_cards).values(
            id=uuid.uuid4(),
            door=door,
            task_id=task_id,
            channel=channel,
            ts=ts,
            revision=revision,
            posted_at=now,
            drawn_at=now,
        )
    )


async def cards_of_task(
    conn: AsyncConnection, door: str, task_id: uuid.UUID
) -> Sequence[dict[str, Any]]:
    rows = await conn.execute(
        select(chat_cards).where(C.door == door, C.task_id == task_id).order_by(C.posted_at)
    )
    return [dict(row._mapping) for row in rows]


async def card_at(conn: AsyncConnection, door: str, channel: str, ts: str) -> dict[str, Any] | None:
    row = (
        await conn.execute(
            select(chat_cards).where(C.door == door, C.channel == channel, C.ts == ts)
        )
    ).first()
    return dict(row._mapping) if row else None


async def record_action(conn: AsyncConnection, **values: Any) -> None:
    await conn.execute(insert(chat_actions).values(**values))
