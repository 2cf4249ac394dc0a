"""Queries behind the console's inbox views, each named for the list it answers.

Read-only: the console changes tasks only through the services' transitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import ACTIVE_STATUSES, TaskStatus
from signoff.domain.tasks import Task, Visibility
from signoff.store.tables import review_tasks
from signoff.store.tasks import status_in, task_from_row, visible

T = review_tasks.c


@dataclass(frozen=True)
class InboxFilters:
    """Filters every view accepts (``None``: any)."""

    entity_type: str | None = None
    reason_code: str | None = None
    group: str | None = None
    level: int | None = None


def _filtered(filters: InboxFilters) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = []
    if filters.entity_type is not None:
        clauses.append(T.entity_type == filters.entity_type)
    if filters.reason_code is not None:
        clauses.append(T.reason_code == filters.reason_code)
    if filters.group is not None:
        clauses.append(T.assigned_group == filters.group)
    if filters.level is not None:
        clauses.append(T.escalation_level == filters.level)
    return clauses


def _claimable(now: datetime) -> ColumnElement[bool]:
    return and_(
        status_in(ACTIVE_STATUSES),
        or_(T.status == TaskStatus.PENDING_REVIEW.value, T.lease_expires_at <= now),
    )


async def tasks_held_by(
    conn: AsyncConnection,
    *,
    holder: str,
    now: datetime,
    scope: Visibility,
    filters: InboxFilters,
    limit: int,
) -> Sequence[Task]:
    """Tasks whose live lease ``holder`` holds, the soonest to lapse first."""
    statement = (
        select(review_tasks)
        .where(
            T.status == TaskStatus.CLAIMED.value,
            T.claimed_by == holder,
            T.lease_expires_at > now,
            visible(scope),
            *_filtered(filters),
        )
        .order_by(T.lease_expires_at, T.id)
        .limit(limit)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def claimable_tasks(
    conn: AsyncConnection,
    *,
    now: datetime,
    scope: Visibility,
    filters: InboxFilters,
    limit: int,
) -> Sequence[Task]:
    """What a reviewer in ``groups`` (``None``: every group) may claim, oldest first."""
    statement = (
        select(review_tasks)
        .where(_claimable(now), visible(scope), *_filtered(filters))
        .order_by(T.created_at, T.id)
        .limit(limit)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def tasks_due_by(
    conn: AsyncConnection,
    *,
    due_by: datetime,
    scope: Visibility,
    filters: InboxFilters,
    limit: int,
) -> Sequence[Task]:
    """Active tasks whose deadline falls before ``due_by`` (overdue ones included), the
    most urgent first."""
    statement = (
        select(review_tasks)
        .where(
            status_in(ACTIVE_STATUSES),
            T.deadline_at.is_not(None),
            T.deadline_at <= due_by,
            visible(scope),
            *_filtered(filters),
        )
        .order_by(T.deadline_at, T.id)
        .limit(limit)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def tasks_decided_by(
    conn: AsyncConnection, *, operator: str, scope: Visibility, filters: InboxFilters, limit: int
) -> Sequence[Task]:
    """Tasks ``operator`` decided (their decision still stands), the latest first."""
    statement = (
        select(review_tasks)
        .where(
            T.status == TaskStatus.RESOLVED.value,
            T.operator_id == operator,
            visible(scope),
            *_filtered(filters),
        )
        .order_by(T.resolved_at.desc(), T.id)
        .limit(limit)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def active_tasks(
    conn: AsyncConnection, *, scope: Visibility, filters: InboxFilters, limit: int
) -> Sequence[Task]:
    """Every waiting or claimed task, oldest first (the supervisors' view)."""
    statement = (
        select(review_tasks)
        .where(status_in(ACTIVE_STATUSES), visible(scope), *_filtered(filters))
        .order_by(T.created_at, T.id)
        .limit(limit)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def overdue_tasks(
    conn: AsyncConnection, *, now: datetime, scope: Visibility, filters: InboxFilters, limit: int
) -> Sequence[Task]:
    """Active tasks past their deadline, the highest escalation level first."""
    statement = (
        select(review_tasks)
        .where(
            status_in(ACTIVE_STATUSES),
            T.deadline_at.is_not(None),
            T.deadline_at <= now,
            visible(scope),
            *_filtered(filters),
        )
        .order_by(T.escalation_level.desc(), T.deadline_at, T.id)
        .limit(limit)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def active_facets(
    conn: AsyncConnection, *, scope: Visibility, limit: int
) -> dict[str, list[str]]:
    """The distinct entity types, reason codes and groups among the active tasks
    ``scope`` admits (for the filter choices)."""
    facets: dict[str, list[str]] = {}
    for name, column in (
        ("entity_type", T.entity_type),
        ("reason_code", T.reason_code),
        ("group", T.assigned_group),
    ):
        statement = (
            select(column)
            .distinct()
            .where(status_in(ACTIVE_STATUSES), visible(scope), column.is_not(None))
            .order_by(column)
            .limit(limit)
        )
        facets[name] = [str(value) for value in (await conn.execute(statement)).scalars()]
    levels = select(func.max(T.escalation_level)).where(status_in(ACTIVE_STATUSES), visible(scope))
    top = (await conn.execute(levels)).scalar_one_or_none() or 0
    facets["level"] = [str(level) for level in range(int(top) + 1)]
    return facets
