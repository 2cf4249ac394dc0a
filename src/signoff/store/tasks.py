"""Queries on review tasks, each named for the question it answers.

Every state change is **one conditional ``UPDATE … RETURNING``** whose ``WHERE`` clause
is built from the transition table (:mod:`signoff.domain.states`): no row back means the
transition was not allowed at that instant, and the caller explains why afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Integer,
    Row,
    and_,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.decisions import rule_for
from signoff.domain.states import ACTIVE_STATUSES, Decision, LeaseRule, TaskStatus, Transition
from signoff.domain.tasks import Task, Visibility
from signoff.store.tables import review_tasks

T = review_tasks.c


def status_in(statuses: Iterable[TaskStatus]) -> ColumnElement[bool]:
    """``status IN ('A', 'B')`` with literal values in a fixed order, written exactly as
    the partial indexes' predicates, so both engines' planners can prove the index
    applies (neither can with bound parameters)."""
    ordered = [s.value for s in TaskStatus if s in set(statuses)]
    if not ordered:
        return false()
    return literal_column(
        "status IN (" + ", ".join(f"'{value}'" for value in ordered) + ")", Boolean
    )


_TASK_FIELDS = tuple(field.name for field in fields(Task))


def task_from_row(row: Row[Any]) -> Task:
    m = row._mapping
    values = {name: m[name] for name in _TASK_FIELDS}
    values["status"] = TaskStatus(values["status"])
    return Task(**values)


#: A task given back: no holder, no lease.
LEASE_CLEARED: dict[str, Any] = {
    "claimed_by": None,
    "lease_token_hash": None,
    "lease_expires_at": None,
}


async def update_task_if(
    conn: AsyncConnection, conditions: Sequence[Any], values: dict[str, Any], *, now: datetime
) -> Task | None:
    """The one shape of every state change: a conditional ``UPDATE … RETURNING`` that
    bumps ``version`` and ``updated_at``. ``None`` when no row matched (the change was not
    allowed at that instant); callers explain why only afterwards."""
    statement = (
        update(review_tasks)
        .where(*conditions)
        .values(**values, version=T.version + 1, updated_at=now)
        .returning(*review_tasks.c)
    )
    row = (await conn.execute(statement)).first()
    return task_from_row(row) if row else None


def _guard(
    transition: Transition,
    *,
    now: datetime,
    lease_token_hash: str | None = None,
    holder: str | None = None,
    lease: LeaseRule | None = None,
) -> ColumnElement[bool]:
    """The ``WHERE`` clause that makes ``transition`` legal, from the transition table
    (``lease`` overrides its lease rule: claim-next takes only tasks nobody holds)."""
    clauses: list[ColumnElement[bool]] = [status_in(transition.sources)]
    rule = lease or transition.lease
    if rule is LeaseRule.CLAIMABLE:
        clauses.append(or_(T.status == TaskStatus.PENDING_REVIEW.value, T.lease_expires_at <= now))
    elif rule is LeaseRule.CLAIMABLE_OR_OWN:
        clauses.append(
            or_(
                T.status == TaskStatus.PENDING_REVIEW.value,
                T.lease_expires_at <= now,
                T.claimed_by == holder,
            )
        )
    elif rule in (LeaseRule.HELD, LeaseRule.HELD_LIVE):
        clauses += [T.lease_token_hash == lease_token_hash, T.claimed_by == holder]
        if rule is LeaseRule.HELD_LIVE:
            clauses.append(T.lease_expires_at > now)
    if transition.by_votes is not None:
        has_rule = T.approval_rule.is_not(None)
        clauses.append(has_rule if transition.by_votes else T.approval_rule.is_(None))
    return and_(*clauses)


def visible(scope: Visibility) -> ColumnElement[bool]:
    """:class:`signoff.domain.tasks.Visibility` as a ``WHERE`` clause: the tasks a
    principal may read (and, for reviewers, claim)."""
    clauses: list[ColumnElement[bool]] = []
    if scope.producer_id is not None:
        clauses.append(T.producer_id == scope.producer_id)
    if scope.groups is not None:
        clauses.append(or_(T.assigned_group.is_(None), T.assigned_group.in_(list(scope.groups))))
    return and_(true(), *clauses)


def _visible_to(groups: tuple[str, ...] | None) -> ColumnElement[bool]:
    """A claim's scope: a reviewer's groups (``None``: any task)."""
    return visible(Visibility(groups=groups))


async def insert_task(conn: AsyncConnection, values: dict[str, Any]) -> Task | None:
    """Insert a new task; ``None`` when a unique rule refused it (same id, or an active
    task for the same entity), without raising, so the transaction stays usable."""
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = (
        dialect_insert(review_tasks)
        .values(**values)
        .on_conflict_do_nothing()
        .returning(*review_tasks.c)
    )
    row = (await conn.execute(statement)).first()
    return task_from_row(row) if row else None


async def find_task(conn: AsyncConnection, task_id: uuid.UUID) -> Task | None:
    row = (await conn.execute(select(review_tasks).where(T.id == task_id))).first()
    return task_from_row(row) if row else None


async def lock_task(conn: AsyncConnection, task_id: uuid.UUID) -> Task | None:
    """The task, its row locked until the transaction ends (PostgreSQL ``FOR UPDATE``;
    SQLite's one writer serialises anyway)."""
    statement = select(review_tasks).where(T.id == task_id).with_for_update()
    row = (await conn.execute(statement)).first()
    return task_from_row(row) if row else None


async def find_active_task_for_entity(
    conn: AsyncConnection, entity_type: str, entity_id: str
) -> Task | None:
    statement = select(review_tasks).where(
        T.entity_type == entity_type, T.entity_id == entity_id, status_in(ACTIVE_STATUSES)
    )
    row = (await conn.execute(statement)).first()
    return task_from_row(row) if row else None


async def claim_task(
    conn: AsyncConnection,
    transition: Transition,
    task_id: uuid.UUID,
    *,
    operator_id: str,
    lease_token_hash: str,
    now: datetime,
    lease_expires_at: datetime,
    groups: tuple[str, ...] | None = None,
) -> Task | None:
    """The claim: pending, or claimed with a lapsed lease → claimed by
    ``operator_id`` under a fresh lease token. ``groups``: the reviewer's groups (None for
    supervisors, who may claim any task)."""
    return await update_task_if(
        conn,
        [T.id == task_id, _guard(transition, now=now, holder=operator_id), _visible_to(groups)],
        _claim_values(operator_id, lease_token_hash, lease_expires_at),
        now=now,
    )


def _claim_values(
    operator_id: str, lease_token_hash: str, lease_expires_at: datetime
) -> dict[str, Any]:
    return {
        "status": TaskStatus.CLAIMED.value,
        "claimed_by": operator_id,
        "lease_token_hash": lease_token_hash,
        "lease_expires_at": lease_expires_at,
    }


async def claim_next_claimable(
    conn: AsyncConnection,
    transition: Transition,
    *,
    operator_id: str,
    lease_token_hash: str,
    now: datetime,
    lease_expires_at: datetime,
    entity_type: str | None = None,
    reason_code: str | None = None,
    groups: tuple[str, ...] | None = None,
) -> Task | None:
    """Claim the oldest claimable task matching the filters, or return ``None``.

    PostgreSQL: ``FOR UPDATE SKIP LOCKED`` lets concurrent reviewers take different rows
    instead of queueing on the same one. SQLite: ``BEGIN IMMEDIATE`` already serialises
    writers, so the sub-select and the update are atomic together.
    """
    guard = and_(_guard(transition, now=now, lease=LeaseRule.CLAIMABLE), _visible_to(groups))
    candidate = select(T.id).where(guard)
    if entity_type is not None:
        candidate = candidate.where(T.entity_type == entity_type)
    if reason_code is not None:
        candidate = candidate.where(T.reason_code == reason_code)
    candidate = candidate.order_by(T.created_at, T.id).limit(1).with_for_update(skip_locked=True)
    return await update_task_if(
        conn,
        [T.id == candidate.scalar_subquery(), guard],
        _claim_values(operator_id, lease_token_hash, lease_expires_at),
        now=now,
    )


async def count_live_leases(
    conn: AsyncConnection, principal_id: str, *, now: datetime, exclude: uuid.UUID | None = None
) -> int:
    """How many live (unlapsed) leases ``principal_id`` holds, ``exclude`` aside. On SQLite
    the write transaction (``BEGIN IMMEDIATE``) makes count-then-claim atomic; PostgreSQL
    counts inside the claim statement (:mod:`signoff.store.oneshot`)."""
    statement = select(func.count()).where(
        T.status == TaskStatus.CLAIMED.value, T.claimed_by == principal_id, T.lease_expires_at > now
    )
    if exclude is not None:
        statement = statement.where(T.id != exclude)
    return int((await conn.execute(statement)).scalar_one())


async def update_held_task(
    conn: AsyncConnection,
    transition: Transition,
    task_id: uuid.UUID,
    *,
    holder: str,
    lease_token_hash: str,
    now: datetime,
    values: dict[str, Any],
) -> Task | None:
    """Apply ``values`` to a task whose lease ``holder`` holds under ``lease_token_hash``
    (renew: a new expiry; release: back to the queue)."""
    guard = _guard(transition, now=now, lease_token_hash=lease_token_hash, holder=holder)
    return await update_task_if(conn, [T.id == task_id, guard], values, now=now)


async def resolve_task(
    conn: AsyncConnection,
    transition: Transition,
    task_id: uuid.UUID,
    *,
    holder: str,
    holder_key_id: uuid.UUID,
    lease_token_hash: str,
    now: datetime,
    decision: Decision,
    notes: str | None,
    resolution_payload: Any,
    revision: int | None,
    digest: str | None,
    change_request: dict[str, Any] | None = None,
    edit: dict[str, Any] | None = None,
) -> Task | None:
    """Record the decision, only under a live lease held with the current token, naming
    the current revision and digest when the task has a subject, and as the decision
    rules say (:mod:`signoff.domain.decisions`): the subject a decision needs, and never
    by the principal that escalated the task. The token hash stays on the row so
    an identical repeat can be recognised. An approval is bound to the revision, digest
    and key that made it."""
    conditions = [
        T.id == task_id,
        _guard(transition, now=now, lease_token_hash=lease_token_hash, holder=holder),
        or_(
            and_(T.current_revision.is_(None), literal(revision, Integer).is_(None)),
            and_(T.current_revision == revision, T.digest == digest),
        ),
    ]
    values: dict[str, Any] = {
        "status": transition.status_after().value,
        "decision": decision.value,
        "notes": notes,
        "resolution_payload": resolution_payload,
        "change_request": change_request,
        "operator_id": holder,
        "resolved_at": now,
    }
    rule = rule_for(decision)
    if rule.needs_subject:
        conditions.append(T.current_revision.is_not(None))
    if not rule.producer_may_decide:
        conditions.append(T.producer_id != holder)
    if rule.grants_approval:
        values |= {
            "approved_revision": T.current_revision,
            "approved_digest": T.digest,
            "approver_key_id": holder_key_id,
        }
    if edit is not None:
        # The edit becomes current, and an approval binds the edit (the conditions above
        # still compare the revision the reviewer saw).
        values |= edit
        if rule.grants_approval:
            values |= {
                "approved_revision": edit["current_revision"],
                "approved_digest": edit["digest"],
            }
    return await update_task_if(conn, conditions, values, now=now)


async def list_tasks(
    conn: AsyncConnection,
    *,
    now: datetime,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
    status: TaskStatus | None = None,
    entity_type: str | None = None,
    entity_id: str | None = None,
    reason_code: str | None = None,
    execution_status: str | None = None,
    claimed_by: str | None = None,
    assigned_group: str | None = None,
    open_to_votes: bool = False,
    scope: Visibility,
) -> Sequence[Task]:
    """Tasks ``scope`` admits in creation order (oldest first), keyset-paginated after
    ``(created_at, id)``; ``open_to_votes``: only tasks decided by votes and still open
    to them.

    ``status`` filters by the *effective* status: a claim whose lease lapsed counts as
    ``PENDING_REVIEW``, not ``CLAIMED``.
    """
    statement = select(review_tasks).where(visible(scope))
    if status is TaskStatus.PENDING_REVIEW:
        statement = statement.where(
            or_(
                T.status == TaskStatus.PENDING_REVIEW.value,
                and_(T.status == TaskStatus.CLAIMED.value, T.lease_expires_at <= now),
            )
        )
    elif status is TaskStatus.CLAIMED:
        statement = statement.where(T.status == TaskStatus.CLAIMED.value, T.lease_expires_at > now)
    elif status is not None:
        statement = statement.where(T.status == status.value)
    for column, value in (
        (T.entity_type, entity_type),
        (T.entity_id, entity_id),
        (T.reason_code, reason_code),
        (T.execution_status, execution_status),
        (T.assigned_group, assigned_group),
    ):
        if value is not None:
            statement = statement.where(column == value)
    if open_to_votes:
        statement = statement.where(
            T.status == TaskStatus.PENDING_REVIEW.value, T.approval_rule.is_not(None)
        )
    if claimed_by is not None:  # a live claim only, like the status filter
        statement = statement.where(
            T.status == TaskStatus.CLAIMED.value,
            T.lease_expires_at > now,
            T.claimed_by == claimed_by,
        )
    if after is not None:
        created_at, task_id = after
        statement = statement.where(
            or_(T.created_at > created_at, and_(T.created_at == created_at, T.id > task_id))
        )
    statement = statement.order_by(T.created_at, T.id).limit(limit)
    return [task_from_row(row) for row in await conn.execute(statement)]
