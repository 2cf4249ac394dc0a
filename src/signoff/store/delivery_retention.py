"""Retention of delivered work (the sweeper's): :data:`PURGE_DELIVERED`,
:data:`PURGE_DEAD` and :data:`PURGE_EVENTS` remove old finished deliveries (their
attempts go with them) and then old fanned-out events left without any delivery, a batch
per statement, on both engines.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Delete, bindparam, delete, exists, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.webhooks import DeliveryStatus
from signoff.store.deliveries import PENDING
from signoff.store.tables import outbox_events, webhook_deliveries

D = webhook_deliveries.c
O = outbox_events.c  # noqa: E741


def _finished_before(status: DeliveryStatus) -> Delete:
    """Up to ``:limit`` deliveries finished with ``status`` at or before ``:cutoff``."""
    doomed = (
        select(D.id)
        .where(
            D.status == literal_column(f"'{status.value}'"),
            D.status != PENDING,  # the partial index's own condition, written as it is
            D.updated_at <= bindparam("cutoff", type_=D.updated_at.type),
        )
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)  # PostgreSQL: sweepers split the rows
    )
    return delete(webhook_deliveries).where(D.id.in_(doomed.scalar_subquery()))


#: Retention, both engines: deliveries that succeeded at or before ``:cutoff``.
PURGE_DELIVERED = _finished_before(DeliveryStatus.SUCCEEDED)
#: Retention: dead-lettered deliveries whose last attempt was at or before ``:cutoff``.
PURGE_DEAD = _finished_before(DeliveryStatus.DEAD)
#: Retention: outbox events written at or before ``:cutoff``, fanned out, with no delivery
#: left (every delivery of theirs finished and was removed, or there never was one). An
#: event still waiting for its fan-out, or with any delivery, pending or kept, stays.
PURGE_EVENTS = delete(outbox_events).where(
    O.id.in_(
        select(O.id)
        .where(
            O.fanned_out_at.is_not(None),
            O.created_at <= bindparam("cutoff", type_=O.created_at.type),
            ~exists().where(D.event_id == O.id),
        )
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
)


async def purge(conn: AsyncConnection, statement: Delete, *, cutoff: datetime, limit: int) -> int:
    """Run one retention statement; returns how many rows it removed."""
    result = await conn.execute(statement, {"cutoff": cutoff, "limit": limit})
    return int(result.rowcount or 0)
