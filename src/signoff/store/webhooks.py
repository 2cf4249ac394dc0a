"""Queries for webhook endpoints (their settings and failure streaks), and deliveries as
an admin reads and requeues them. What the dispatcher runs is in
:mod:`signoff.store.deliveries`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.clock import rfc3339
from signoff.domain.webhooks import DeliveryStatus
from signoff.store.tables import (
    delivery_attempts,
    outbox_events,
    webhook_deliveries,
    webhook_endpoints,
)

E = webhook_endpoints.c
D = webhook_deliveries.c
A = delivery_attempts.c
O = outbox_events.c  # noqa: E741


def endpoint_view(row: Any) -> dict[str, Any]:
    """An endpoint as the API shows it: never its secrets."""
    m = row._mapping
    return {
        "id": str(m["id"]),
        "url": m["url"],
        "description": m["description"],
        "event_types": m["event_types"],
        "entity_types": m["entity_types"],
        "producer_id": m["producer_id"],
        "enabled": m["enabled"],
        "disabled_reason": m["disabled_reason"],
        "failing_since": rfc3339(m["failing_since"]),
        "created_at": rfc3339(m["created_at"]),
        "updated_at": rfc3339(m["updated_at"]),
        "asymmetric_signature": m["asymmetric_signature"],
    }


async def insert_endpoint(conn: AsyncConnection, values: dict[str, Any]) -> Any:
    return (
        await conn.execute(
            insert(webhook_endpoints).values(**values).returning(*webhook_endpoints.c)
        )
    ).one()


async def find_endpoint(conn: AsyncConnection, endpoint_id: uuid.UUID) -> Any | None:
    return (await conn.execute(select(webhook_endpoints).where(E.id == endpoint_id))).first()


async def list_endpoints(conn: AsyncConnection) -> Sequence[Any]:
    return (await conn.execute(select(webhook_endpoints).order_by(E.created_at, E.id))).all()


async def update_endpoint(
    conn: AsyncConnection, endpoint_id: uuid.UUID, values: dict[str, Any]
) -> Any | None:
    statement = (
        update(webhook_endpoints)
        .where(E.id == endpoint_id)
        .values(**values)
        .returning(*webhook_endpoints.c)
    )
    return (await conn.execute(statement)).first()


async def delete_endpoint(conn: AsyncConnection, endpoint_id: uuid.UUID) -> bool:
    result = await conn.execute(
        delete(webhook_endpoints).where(E.id == endpoint_id).returning(E.id)
    )
    return result.first() is not None


async def note_endpoint_result(
    conn: AsyncConnection, endpoint_id: uuid.UUID, *, succeeded: bool, now: datetime
) -> datetime | None:
    """Track an endpoint's failure streak; returns when it started failing (or None)."""
    if succeeded:
        await conn.execute(
            update(webhook_endpoints)
            .where(E.id == endpoint_id, E.failing_since.is_not(None))
            .values(failing_since=None)
        )
        return None
    await conn.execute(
        update(webhook_endpoints)
        .where(E.id == endpoint_id, E.failing_since.is_(None))
        .values(failing_since=now)
    )
    return (
        await conn.execute(select(E.failing_since).where(E.id == endpoint_id))
    ).scalar_one_or_none()


async def disable_endpoint(
    conn: AsyncConnection, endpoint_id: uuid.UUID, *, reason: str, now: datetime
) -> None:
    await conn.execute(
        update(webhook_endpoints)
        .where(E.id == endpoint_id, E.enabled.is_(True))
        .values(enabled=False, disabled_reason=reason, updated_at=now)
    )


def _delivery_view(row: Any, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "endpoint_id": str(row.endpoint_id),
        "event_id": str(row.event_id),
        "event_type": row.event_type,
        "task_id": str(row.task_id),
        "status": row.status,
        "attempt_count": row.attempt_count,
        "next_attempt_at": rfc3339(row.next_attempt_at)
        if row.status == DeliveryStatus.PENDING.value
        else None,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "created_at": rfc3339(row.created_at),
        "delivered_at": rfc3339(row.delivered_at),
        "attempts": attempts,
    }


async def list_deliveries(
    conn: AsyncConnection,
    *,
    endpoint_id: uuid.UUID | None = None,
    task_id: uuid.UUID | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """The ``limit`` most recent deliveries (oldest of them first) with every attempt:
    time, status code, latency, error."""
    statement = (
        select(webhook_deliveries, O.event_type)
        .join(outbox_events, O.id == D.event_id)
        .order_by(D.created_at.desc(), D.task_version.desc(), D.id.desc())
        .limit(limit)
    )
    if endpoint_id is not None:
        statement = statement.where(D.endpoint_id == endpoint_id)
    if task_id is not None:
        statement = statement.where(D.task_id == task_id)
    rows = list(reversed((await conn.execute(statement)).all()))
    if not rows:
        return []
    attempts: dict[uuid.UUID, list[dict[str, Any]]] = {row.id: [] for row in rows}
    for attempt in await conn.execute(
        select(delivery_attempts).where(A.delivery_id.in_(list(attempts))).order_by(A.id)
    ):
        attempts[attempt.delivery_id].append(
            {
                "attempt": attempt.attempt,
                "attempted_at": rfc3339(attempt.attempted_at),
                "status_code": attempt.status_code,
                "latency_ms": attempt.latency_ms,
                "error": attempt.error,
                "response_body": attempt.response_body,
            }
        )
    return [_delivery_view(row, attempts[row.id]) for row in rows]


async def requeue_delivery(conn: AsyncConnection, delivery_id: uuid.UUID, *, now: datetime) -> bool:
    """Send a delivery again from the start of the schedule, same event id."""
    result = await conn.execute(
        update(webhook_deliveries)
        .where(
            D.id == delivery_id,
            or_(D.status != DeliveryStatus.PENDING.value, D.leased_until.is_(None)),
        )
        .values(
            status=DeliveryStatus.PENDING.value,
            attempt_count=0,
            next_attempt_at=now,
            leased_until=None,
            lease_owner=None,
            updated_at=now,
        )
        .returning(D.id)
    )
    return result.first() is not None
