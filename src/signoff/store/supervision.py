"""Conditional updates for supervisors stepping in: force release, hand-over, withdrawal.

Each is one ``UPDATE … RETURNING`` guarded by the transition's source statuses (and, for
a force release, the holder the supervisor saw), like every other state change.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import Transition
from signoff.domain.tasks import Task
from signoff.store.tables import api_keys, escalation_policies, review_tasks, users
from signoff.store.tasks import LEASE_CLEARED, status_in, update_task_if

T = review_tasks.c


async def force_release_task(
    conn: AsyncConnection,
    step: Transition,
    task_id: uuid.UUID,
    *,
    holder: str | None,
    now: datetime,
) -> Task | None:
    """End whatever lease is on a claimed task (``holder``: only if that principal still
    holds it). The holder's token stops matching because the stored hash is cleared."""
    conditions = [T.id == task_id, status_in(step.sources)]
    if holder is not None:
        conditions.append(T.claimed_by == holder)
    values = {"status": step.status_after().value, **LEASE_CLEARED}
    return await update_task_if(conn, conditions, values, now=now)


async def hand_over_task(
    conn: AsyncConnection, step: Transition, task_id: uuid.UUID, *, group: str, now: datetime
) -> Task | None:
    """Assign an active task to ``group``, back in the queue (a lease held ends)."""
    conditions = [T.id == task_id, status_in(step.sources)]
    values = {"status": step.status_after().value, "assigned_group": group, **LEASE_CLEARED}
    return await update_task_if(conn, conditions, values, now=now)


async def withdraw_task(
    conn: AsyncConnection, step: Transition, task_id: uuid.UUID, *, now: datetime
) -> Task | None:
    """Cancel an active task on its producer's behalf."""
    conditions = [T.id == task_id, status_in(step.sources)]
    values = {"status": step.status_after().value, **LEASE_CLEARED}
    return await update_task_if(conn, conditions, values, now=now)


async def named_groups(conn: AsyncConnection) -> tuple[list[Any], list[Any]]:
    """What names groups: the ``groups`` of every enabled user and unrevoked API key, and
    the ``levels`` of every stored escalation policy (as stored, for the service to read)."""
    member_lists = [
        row[0]
        for table, live in ((users, users.c.disabled_at), (api_keys, api_keys.c.revoked_at))
        for row in await conn.execute(select(table.c.groups).where(live.is_(None)))
    ]
    levels = [row[0] for row in await conn.execute(select(escalation_policies.c.levels))]
    return member_lists, levels
