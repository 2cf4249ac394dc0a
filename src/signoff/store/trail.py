"""The audit trail and the transactional outbox: both are appended in the same
transaction as the state change they describe."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, bindparam, case, insert, literal_column, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.clock import rfc3339
from signoff.domain.states import Action, Transition
from signoff.domain.tasks import Principal, Task, task_view
from signoff.store.protocols import Unit
from signoff.store.tables import (
    ANY_ENABLED_ENDPOINT_SQL,
    outbox_events,
    resume_tokens,
    task_events,
)

_ANY_ENABLED_ENDPOINT = literal_column(ANY_ENABLED_ENDPOINT_SQL, Boolean)
_RESOLVE = Action.RESOLVE.value


async def append_audit_event(
    conn: AsyncConnection,
    *,
    task_id: uuid.UUID,
    event_type: str,
    action: str,
    status: str,
    version: int,
    actor_id: str,
    actor_role: str,
    details: dict[str, Any],
    now: datetime,
) -> None:
    await conn.execute(
        insert(task_events).values(
            task_id=task_id,
            event_type=event_type,
            action=action,
            status=status,
            version=version,
            actor_id=actor_id,
            actor_role=actor_role,
            details=details,
            created_at=now,
        )
    )


def envelope(
    event_id: uuid.UUID, event_type: str, now: datetime, data: dict[str, Any]
) -> dict[str, Any]:
    """An outbox event as receivers get it: ``{"id", "type", "created_at", "data"}``."""
    return {"id": str(event_id), "type": event_type, "created_at": rfc3339(now), "data": data}


async def append_outbox_event(
    conn: AsyncConnection,
    *,
    task_id: uuid.UUID,
    task_version: int,
    event_type: str,
    data: dict[str, Any],
    now: datetime,
) -> uuid.UUID:
    """Write the event envelope ``{"id", "type", "created_at", "data"}``; its id is the
    stable identity receivers deduplicate on. Returns that id."""
    event_id = uuid.uuid4()
    await conn.execute(
        insert(outbox_events).values(
            id=event_id,
            event_type=event_type,
            task_id=task_id,
            task_version=task_version,
            payload=envelope(event_id, event_type, now, data),
            created_at=now,
            # With no endpoint enabled, already fanned out (tables.fanned_out_at_sql).
            fanned_out_at=case(
                (_ANY_ENABLED_ENDPOINT, null()),
                else_=bindparam(None, now, type_=outbox_events.c.fanned_out_at.type),
            ),
        )
    )
    return event_id


async def append_transition(
    uow: Unit,
    step: Transition,
    task: Task,
    principal: Principal,
    now: datetime,
    details: dict[str, Any] | None = None,
) -> None:
    """Write what the transition table says a change writes, in the caller's transaction:
    the audit event, the outbox event when published, and the end of the task's resume
    links when the change ends them. The commit then wakes the task's waiters (and the
    dispatcher, for an outbox event)."""
    # Events carry the producer's correlation metadata (its receiver maps them back).
    view = task_view(task, now, metadata=True)
    await append_audit_event(
        uow.connection,
        task_id=task.id,
        event_type=step.event_type,
        action=step.action.value,
        status=view["status"],
        version=task.version,
        actor_id=principal.principal_id,
        actor_role=principal.role.value,
        details=details or {},
        now=now,
    )
    if step.publish:
        uow.wrote_outbox = True
        await append_outbox_event(
            uow.connection,
            task_id=task.id,
            task_version=task.version,
            event_type=step.event_type,
            data=view,
            now=now,
        )
    if step.ends_links:
        await uow.connection.execute(
            update(resume_tokens)
            .where(resume_tokens.c.task_id == task.id, resume_tokens.c.revoked_at.is_(None))
            .values(revoked_at=now)
        )
    uow.changed_tasks.add(task.id)


async def audit_events_for_task(
    conn: AsyncConnection, task_id: uuid.UUID
) -> Sequence[dict[str, Any]]:
    """The task's audit trail, oldest first."""
    rows = await conn.execute(
        select(task_events).where(task_events.c.task_id == task_id).order_by(task_events.c.id)
    )
    return [
        {
            "id": row.id,
            "task_id": str(row.task_id),
            "type": row.event_type,
            "action": row.action,
            "status": row.status,
            "version": row.version,
            "actor_id": row.actor_id,
            "actor_role": row.actor_role,
            "details": row.details,
            "created_at": rfc3339(row.created_at),
        }
        for row in rows
    ]


async def decision_door(conn: AsyncConnection, task_id: uuid.UUID) -> str | None:
    """The door the task's latest single-person decision came through, as its audit event
    records it; ``None``: no such decision, or one recorded without its door."""
    row = (
        await conn.execute(
            select(task_events.c.details)
            .where(task_events.c.task_id == task_id, task_events.c.action == _RESOLVE)
            .order_by(task_events.c.id.desc())
            .limit(1)
        )
    ).first()
    details = row.details if row is not None else None
    door = details.get("door") if isinstance(details, dict) else None
    return door if isinstance(door, str) else None
