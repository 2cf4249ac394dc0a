"""Queries for subjects, revisions, the execution gate and per-action status."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.decisions import decisions_where
from signoff.domain.states import REVIEWERS, ExecutionStatus, Transition
from signoff.domain.tasks import Task
from signoff.store.batch import chosen
from signoff.store.tables import (
    api_keys,
    approval_grants,
    review_tasks,
    revision_views,
    revoked_sources,
    subject_revisions,
    task_actions,
    task_votes,
    users,
)
from signoff.store.tasks import status_in, task_from_row, update_task_if

T = review_tasks.c
S = subject_revisions.c
ACT = task_actions.c


def _dialect_insert(conn: AsyncConnection) -> Any:
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


async def insert_revision(
    conn: AsyncConnection,
    *,
    task_id: uuid.UUID,
    revision: int,
    subject: dict[str, Any],
    digest: str,
    source_revisions: list[str],
    created_by: str,
    now: datetime,
) -> bool:
    """Store an immutable revision; False when that revision number already exists."""
    statement = (
        _dialect_insert(conn)(subject_revisions)
        .values(
            task_id=task_id,
            revision=revision,
            subject=subject,
            digest=digest,
            source_revisions=source_revisions,
            created_by=created_by,
            created_at=now,
        )
        .on_conflict_do_nothing()
        .returning(S.revision)
    )
    return (await conn.execute(statement)).first() is not None


async def find_revision(
    conn: AsyncConnection, task_id: uuid.UUID, revision: int
) -> dict[str, Any] | None:
    row = (
        await conn.execute(
            select(subject_revisions).where(S.task_id == task_id, S.revision == revision)
        )
    ).first()
    return dict(row._mapping) if row else None


async def list_revisions(conn: AsyncConnection, task_id: uuid.UUID) -> Sequence[dict[str, Any]]:
    rows = await conn.execute(
        select(S.revision, S.digest, S.source_revisions, S.created_by, S.created_at)
        .where(S.task_id == task_id)
        .order_by(S.revision)
    )
    return [dict(row._mapping) for row in rows]


async def apply_revision(
    conn: AsyncConnection,
    step: Transition,
    task: Task,
    values: dict[str, Any],
    now: datetime,
) -> Task | None:
    """Compare-and-set the task to its new revision: only if nothing changed since it was
    read (same ``version``) and the status is one ``step`` starts from. ``None`` when the
    task moved on.

    Raises:
        ActiveTaskExists: reopening would make a second active task for the entity (the
            partial unique index refused it, inside a savepoint, so the transaction lives on).
    """
    conditions = [T.id == task.id, T.version == task.version, status_in(step.sources)]
    try:
        async with conn.begin_nested():
            return await update_task_if(conn, conditions, values, now=now)
    except IntegrityError:
        raise ActiveTaskExists(str(task.id)) from None


class ActiveTaskExists(Exception):
    """Reopening the task would make a second active task for its entity."""


def credential_authorised(key_id: Any) -> Any:
    """The credential ``key_id`` names is still live with a deciding role: an API key, or
    a console user (whose id plays the part of the key id)."""
    reviewer_roles = [role.value for role in REVIEWERS]
    return or_(
        exists().where(
            api_keys.c.id == key_id,
            api_keys.c.revoked_at.is_(None),
            api_keys.c.role.in_(reviewer_roles),
        ),
        exists().where(
            users.c.id == key_id,
            users.c.disabled_at.is_(None),
            users.c.role.in_(reviewer_roles),
        ),
    )


def _approver_authorised() -> Any:
    """The approval's credential is still live with a deciding role, and so is every
    live approving vote's on a task decided by votes."""
    votes = task_votes.c
    voter_not_authorised = exists().where(
        votes.task_id == T.id,
        votes.voided_at.is_(None),
        votes.decision.in_([d.value for d in decisions_where("grants_approval")]),
        ~credential_authorised(votes.voter_key_id),
    )
    # A remembered approval rests on its grant: revoked, nothing it approved executes; an
    # admin's grant has no reviewer's credential behind it (approver_key_id is empty).
    grant_revoked = exists().where(
        approval_grants.c.id == T.grant_id, approval_grants.c.revoked_at.is_not(None)
    )
    by_admins_grant = and_(T.grant_id.is_not(None), T.approver_key_id.is_(None))
    credential = or_(credential_authorised(T.approver_key_id), by_admins_grant)
    return and_(credential, ~voter_not_authorised, ~grant_revoked)


def _source_revoked() -> Any:
    return exists().where(revoked_sources.c.task_id == T.id)


async def grant_execution(
    conn: AsyncConnection,
    step: Transition,
    task_id: uuid.UUID,
    *,
    producer_id: str,
    revision: int,
    digest: str,
    operation_id: str,
    token_hash: str,
    lease_expires_at: datetime,
    now: datetime,
) -> Task | None:
    """The execution gate: one conditional update, one winner. It succeeds only if the task
    is approved, ``revision``/``digest`` are both current and the approved ones, the
    approval has not expired, the approver's key is live and may approve *now*, no source
    was revoked, the execution is not completed, and no live execution lease fences
    another executor. The winner gets a new execution lease under ``token_hash``.

    A live lease granted under the same ``operation_id`` does not fence its own retry (the
    grant's answer was lost, or the executor restarted): the retry takes the lease over
    with the new token, which fences the old one."""
    conditions = [
        T.id == task_id,
        T.producer_id == producer_id,
        status_in(step.sources),
        T.decision.in_([d.value for d in decisions_where("grants_approval")]),
        or_(
            T.execution_status.is_(None),
            T.execution_status != ExecutionStatus.COMPLETED.value,
        ),
        or_(
            T.execution_token_hash.is_(None),
            T.execution_lease_expires_at <= now,
            T.execution_operation_id == operation_id,
        ),
        T.current_revision == revision,
        T.digest == digest,
        T.approved_revision == revision,
        T.approved_digest == digest,
        or_(T.approval_expires_at.is_(None), T.approval_expires_at > now),
        _approver_authorised(),
        ~_source_revoked(),
    ]
    values = {
        "execution_status": ExecutionStatus.EXECUTING.value,
        "execution_operation_id": operation_id,
        "executed_at": now,
        "execution_token_hash": token_hash,
        "execution_lease_expires_at": lease_expires_at,
        "execution_stalled_at": None,
    }
    return await update_task_if(conn, conditions, values, now=now)


async def renew_execution(
    conn: AsyncConnection,
    step: Transition,
    task_id: uuid.UUID,
    *,
    producer_id: str,
    token_hash: str,
    lease_expires_at: datetime,
    now: datetime,
) -> Task | None:
    """Extend the execution lease held under ``token_hash``. A lapsed lease still renews
    while its token is current (nobody took the execution over meanwhile)."""
    conditions = [
        T.id == task_id,
        T.producer_id == producer_id,
        status_in(step.sources),
        T.execution_token_hash == token_hash,
    ]
    values = {"execution_lease_expires_at": lease_expires_at, "execution_stalled_at": None}
    return await update_task_if(conn, conditions, values, now=now)


async def lock_live_execution(
    conn: AsyncConnection, task_id: uuid.UUID, *, token_hash: str, now: datetime
) -> bool:
    """Lock the task's row if ``token_hash`` holds its live execution lease (serialising
    the executor's reports, like :func:`lock_task`); False when it does not."""
    statement = (
        select(T.id)
        .where(
            T.id == task_id,
            T.execution_token_hash == token_hash,
            T.execution_lease_expires_at > now,
        )
        .with_for_update()
    )
    return (await conn.execute(statement)).first() is not None


async def mark_stalled_executions(
    conn: AsyncConnection, step: Transition, *, now: datetime, limit: int
) -> list[Task]:
    """Tasks whose execution lease lapsed without an outcome and was not reported yet:
    marked (once per lapse: a grant or a renewal clears the mark), returned for their
    events. ``SKIP LOCKED`` lets sweepers split the work."""
    lapsed = and_(
        status_in(step.sources),
        T.execution_token_hash.is_not(None),
        T.execution_lease_expires_at <= now,
        T.execution_stalled_at.is_(None),
    )
    candidates = (
        select(T.id)
        .where(lapsed)
        .order_by(T.execution_lease_expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    statement = (
        update(review_tasks)
        .where(T.id.in_(chosen(candidates, "lapsed_executions")), lapsed)
        .values(execution_stalled_at=now, version=T.version + 1, updated_at=now)
        .returning(*review_tasks.c)
    )
    return [task_from_row(row) for row in await conn.execute(statement)]


async def approver_authorised(conn: AsyncConnection, task_id: uuid.UUID) -> bool:
    statement = select(T.id).where(T.id == task_id, _approver_authorised())
    return (await conn.execute(statement)).first() is not None


async def any_source_revoked(conn: AsyncConnection, task_id: uuid.UUID) -> bool:
    statement = select(T.id).where(T.id == task_id, _source_revoked())
    return (await conn.execute(statement)).first() is not None


async def revoke_source(
    conn: AsyncConnection, *, task_id: uuid.UUID, source_id: str, by: str, now: datetime
) -> bool:
    """Record the revocation; False when it was already revoked."""
    statement = (
        _dialect_insert(conn)(revoked_sources)
        .values(task_id=task_id, source_id=source_id, revoked_by=by, revoked_at=now)
        .on_conflict_do_nothing()
        .returning(revoked_sources.c.source_id)
    )
    return (await conn.execute(statement)).first() is not None


async def new_task_version(conn: AsyncConnection, task_id: uuid.UUID, now: datetime) -> Task:
    """Give the task a new version for a change kept outside its row (a revoked source),
    under the row's lock: the change's event then orders after every earlier one of the
    task, as webhook delivery order requires."""
    task = await update_task_if(conn, [T.id == task_id], {}, now=now)
    assert task is not None  # tasks are never deleted
    return task


async def insert_actions(
    conn: AsyncConnection, task_id: uuid.UUID, action_ids: Sequence[str], now: datetime
) -> None:
    """The grant's actions, pending; a grant after a lapse keeps the ones already there."""
    await conn.execute(
        _dialect_insert(conn)(task_actions).on_conflict_do_nothing(),
        [
            {"task_id": task_id, "action_id": a, "status": "PENDING", "updated_at": now}
            for a in action_ids
        ],
    )


async def lock_task(conn: AsyncConnection, task_id: uuid.UUID) -> None:
    """Serialise writers of one task's execution (``SELECT … FOR UPDATE`` on PostgreSQL;
    SQLite's ``BEGIN IMMEDIATE`` already serialises every writer)."""
    await conn.execute(select(T.id).where(T.id == task_id).with_for_update())


async def list_actions(conn: AsyncConnection, task_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await conn.execute(
        select(ACT.action_id, ACT.status, ACT.operation_id, ACT.result, ACT.updated_at)
        .where(ACT.task_id == task_id)
        .order_by(ACT.action_id)
    )
    return [dict(row._mapping) for row in rows]


async def set_action_status(
    conn: AsyncConnection,
    *,
    task_id: uuid.UUID,
    action_id: str,
    status: ExecutionStatus,
    operation_id: str,
    result: Any,
    now: datetime,
) -> bool:
    """Move a pending or failed action to ``status``; a completed action never changes."""
    statement = (
        update(task_actions)
        .where(
            ACT.task_id == task_id,
            ACT.action_id == action_id,
            ACT.status.in_(["PENDING", "FAILED"]),
        )
        .values(status=status.value, operation_id=operation_id, result=result, updated_at=now)
        .returning(ACT.action_id)
    )
    return (await conn.execute(statement)).first() is not None


async def set_execution_status(
    conn: AsyncConnection,
    task_id: uuid.UUID,
    status: ExecutionStatus,
    now: datetime,
    *,
    end_lease: bool = False,
) -> Task:
    """``end_lease``: every action has an outcome, so the execution lease ends (a failed
    action may then be retried under a new grant)."""
    values: dict[str, Any] = {"execution_status": status.value}
    if end_lease:
        values |= {
            "execution_token_hash": None,
            "execution_lease_expires_at": None,
            "execution_stalled_at": None,
        }
    task = await update_task_if(conn, [T.id == task_id], values, now=now)
    assert task is not None  # the caller holds the task's row lock
    return task


async def set_approval_expiry(
    conn: AsyncConnection, task_id: uuid.UUID, expires_at: datetime | None
) -> None:
    await conn.execute(
        update(review_tasks).where(T.id == task_id).values(approval_expires_at=expires_at)
    )


async def record_view(
    conn: AsyncConnection, *, task_id: uuid.UUID, principal_id: str, revision: int, now: datetime
) -> int | None:
    """Remember that ``principal_id`` saw ``revision``; returns the revision seen before."""
    previous = (
        await conn.execute(
            select(revision_views.c.revision).where(
                revision_views.c.task_id == task_id, revision_views.c.principal_id == principal_id
            )
        )
    ).scalar_one_or_none()
    statement = _dialect_insert(conn)(revision_views).values(
        task_id=task_id, principal_id=principal_id, revision=revision, viewed_at=now
    )
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[revision_views.c.task_id, revision_views.c.principal_id],
            set_={"revision": revision, "viewed_at": now},
        )
    )
    return previous


async def last_viewed_revision(
    conn: AsyncConnection, *, task_id: uuid.UUID, principal_id: str
) -> int | None:
    """The revision ``principal_id`` last viewed (``None``: never), without recording."""
    return (
        await conn.execute(
            select(revision_views.c.revision).where(
                revision_views.c.task_id == task_id, revision_views.c.principal_id == principal_id
            )
        )
    ).scalar_one_or_none()
