"""Queries for durable waiting: policies, due tasks, escalation levels,
cancellation, resume tokens, recipients and the notification outbox."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import ACTIVE_STATUSES, REVIEWERS, Role, Transition
from signoff.domain.tasks import Principal, Task
from signoff.store.batch import chosen
from signoff.store.named import upsert_named
from signoff.store.tables import (
    api_keys,
    escalation_policies,
    notifications,
    resume_tokens,
    review_tasks,
    users,
)
from signoff.store.tasks import LEASE_CLEARED, status_in, task_from_row, update_task_if

T = review_tasks.c
P = escalation_policies.c
R = resume_tokens.c
N = notifications.c


# Policies ------------------------------------------------------------------------------


async def upsert_policy(
    conn: AsyncConnection,
    *,
    name: str,
    levels: list[dict[str, Any]],
    headline: dict[str, Any] | None,
    now: datetime,
    create: bool,
) -> bool:
    """Insert (``create``) or replace a policy; False when it already exists / does not."""
    values = {"levels": levels, "headline": headline}
    return await upsert_named(
        conn, escalation_policies, name=name, values=values, now=now, create=create
    )


async def find_policy(conn: AsyncConnection, name: str) -> dict[str, Any] | None:
    row = (await conn.execute(select(escalation_policies).where(P.name == name))).first()
    return dict(row._mapping) if row else None


async def list_policies(conn: AsyncConnection) -> Sequence[dict[str, Any]]:
    return [
        dict(r._mapping) for r in await conn.execute(select(escalation_policies).order_by(P.name))
    ]


async def delete_policy(conn: AsyncConnection, name: str) -> bool:
    return (
        await conn.execute(delete(escalation_policies).where(P.name == name).returning(P.name))
    ).first() is not None


# Deadlines and levels ------------------------------------------------------------------


async def lock_due_tasks(conn: AsyncConnection, *, now: datetime, limit: int) -> list[Task]:
    """Active tasks whose next level is due, oldest deadline first. On PostgreSQL the rows
    are locked ``SKIP LOCKED``: concurrent sweepers take different batches."""
    statement = (
        select(review_tasks)
        .where(status_in(ACTIVE_STATUSES), T.deadline_at <= now)
        .order_by(T.deadline_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def apply_level(
    conn: AsyncConnection, step: Transition, task: Task, *, values: dict[str, Any], now: datetime
) -> Task | None:
    """Move the task past its current level: only if it is still at that level, still
    waiting and due (so a level is applied exactly once, whoever sweeps)."""
    conditions = [
        T.id == task.id,
        T.escalation_level == task.escalation_level,
        status_in(step.sources),
        T.deadline_at <= now,
    ]
    return await update_task_if(conn, conditions, values, now=now)


async def cancel_task(
    conn: AsyncConnection, step: Transition, task_id: uuid.UUID, *, producer_id: str, now: datetime
) -> Task | None:
    conditions = [T.id == task_id, T.producer_id == producer_id, status_in(step.sources)]
    values = {"status": step.status_after().value, **LEASE_CLEARED}
    return await update_task_if(conn, conditions, values, now=now)


# Recipients ----------------------------------------------------------------------------


async def reviewers_for(conn: AsyncConnection, targets: Sequence[str]) -> list[dict[str, Any]]:
    """Live reviewer and supervisor keys named by ``group:<name>`` / ``principal:<id>``
    targets, one entry per principal: ``{"principal_id", "email", "key_id", "notify"}``
    (``notify``: the person's console account's choice, else each event)."""
    groups = {t.split(":", 1)[1] for t in targets if t.startswith("group:")}
    principals = {t.split(":", 1)[1] for t in targets if t.startswith("principal:")}
    if not groups and not principals:
        return []
    rows = list(
        await conn.execute(
            select(api_keys.c.id, api_keys.c.principal_id, api_keys.c.email, api_keys.c.groups)
            .where(
                api_keys.c.revoked_at.is_(None), api_keys.c.role.in_([r.value for r in REVIEWERS])
            )
            .order_by(api_keys.c.created_at)
        )
    )
    # Console users are principals too (their id plays the part of the key id).
    rows += list(
        await conn.execute(
            select(users.c.id, users.c.principal_id, users.c.email, users.c.groups, users.c.notify)
            .where(users.c.disabled_at.is_(None), users.c.role.in_([r.value for r in REVIEWERS]))
            .order_by(users.c.created_at)
        )
    )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        wanted = row.principal_id in principals or bool(groups & set(row.groups or []))
        if wanted and row.principal_id not in found:
            found[row.principal_id] = {
                "principal_id": row.principal_id,
                "email": row.email,
                "key_id": row.id,
                "notify": None,
            }
        elif wanted and row.email and not found[row.principal_id]["email"]:
            found[row.principal_id]["email"] = row.email
        if wanted and "notify" in row._fields:
            found[row.principal_id]["notify"] = row.notify
    return list(found.values())


async def approver_principal(conn: AsyncConnection, principal_id: str) -> Principal | None:
    """The principal as it may decide now: its oldest live reviewer or supervisor key
    (an approval is bound to it), else its enabled console account with such a role;
    with that key's or account's role and groups. ``None`` when it has neither."""
    row = (
        await conn.execute(
            select(api_keys.c.id, api_keys.c.role, api_keys.c.groups)
            .where(
                api_keys.c.principal_id == principal_id,
                api_keys.c.revoked_at.is_(None),
                api_keys.c.role.in_([r.value for r in REVIEWERS]),
            )
            .order_by(api_keys.c.created_at)
            .limit(1)
        )
    ).first()
    if row is None:
        row = (
            await conn.execute(
                select(users.c.id, users.c.role, users.c.groups).where(
                    users.c.principal_id == principal_id,
                    users.c.disabled_at.is_(None),
                    users.c.role.in_([r.value for r in REVIEWERS]),
                )
            )
        ).first()
    if row is None:
        return None
    return Principal(
        key_id=row.id,
        principal_id=principal_id,
        role=Role(row.role),
        groups=tuple(row.groups or ()),
    )


# Resume tokens -------------------------------------------------------------------------


async def insert_resume_token(
    conn: AsyncConnection,
    *,
    token_hash: str,
    task_id: uuid.UUID,
    principal_id: str,
    expires_at: datetime,
    now: datetime,
) -> None:
    await conn.execute(
        insert(resume_tokens).values(
            token_hash=token_hash,
            task_id=task_id,
            principal_id=principal_id,
            expires_at=expires_at,
            created_at=now,
        )
    )


async def find_resume_token(conn: AsyncConnection, token_hash: str) -> dict[str, Any] | None:
    row = (await conn.execute(select(resume_tokens).where(R.token_hash == token_hash))).first()
    return dict(row._mapping) if row else None


# Notification outbox -------------------------------------------------------------------


async def insert_notifications(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(insert(notifications), rows)


async def has_due_notifications(conn: AsyncConnection, *, now: datetime) -> bool:
    """A read first, so an idle notifier takes no write lock."""
    probe = select(N.id).where(N.status == "PENDING", N.next_attempt_at <= now).limit(1)
    return (await conn.execute(probe)).first() is not None


async def claim_due_notifications(
    conn: AsyncConnection, *, now: datetime, leased_until: datetime, limit: int
) -> list[dict[str, Any]]:
    due = and_(
        N.status == "PENDING",
        N.next_attempt_at <= now,
        or_(N.leased_until.is_(None), N.leased_until <= now),
    )
    candidates = (
        select(N.id)
        .where(due)
        .order_by(N.next_attempt_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    rows = await conn.execute(
        update(notifications)
        .where(N.id.in_(chosen(candidates, "due_notifications")), due)
        .values(leased_until=leased_until, attempts=N.attempts + 1)
        .returning(*notifications.c)
    )
    return [dict(row._mapping) for row in rows]


async def finish_notification(
    conn: AsyncConnection,
    notification_id: uuid.UUID,
    *,
    attempt: int,
    sent: bool,
    error: str | None,
    next_attempt_at: datetime | None,
    now: datetime,
) -> None:
    status = "SENT" if sent else ("PENDING" if next_attempt_at else "DEAD")
    values: dict[str, Any] = {"status": status, "leased_until": None, "last_error": error}
    if status != "PENDING":
        values["resume_token"] = None  # sent or dead: no token kept at rest
    if sent:
        values["sent_at"] = now
    if next_attempt_at:
        values["next_attempt_at"] = next_attempt_at
    await conn.execute(
        update(notifications)
        .where(N.id == notification_id, N.attempts == attempt, N.status == "PENDING")
        .values(**values)
    )


async def notifications_for_task(conn: AsyncConnection, task_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await conn.execute(
        select(notifications).where(N.task_id == task_id).order_by(N.created_at, N.id)
    )
    return [dict(row._mapping) for row in rows]
