"""Votes on tasks with an approval rule, and the admin-managed rules escalations name.

A vote is written in a transaction that first locks the task's row (PostgreSQL
``FOR UPDATE``; SQLite's one writer serialises anyway): the votes counted, the vote
inserted and the task's decision are one step, so racing votes reach a rule's quorum
exactly once. The live votes are also kept on the task (``review_tasks.votes``) so every
read of a task shows them without a join; ``task_votes`` keeps every vote ever cast, and
its unique index refuses a second live vote by a person at a stage.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.approval_rules import Vote
from signoff.domain.states import REVIEWERS, Transition
from signoff.domain.tasks import Task
from signoff.store.named import upsert_named
from signoff.store.tables import api_keys, approval_rules, review_tasks, task_votes, users
from signoff.store.tasks import status_in, update_task_if

T = review_tasks.c
V = task_votes.c
A = approval_rules.c


async def change_voted_task(
    conn: AsyncConnection, step: Transition, task: Task, values: dict[str, Any], now: datetime
) -> Task | None:
    """``step`` on a task decided by votes, as read (locked) at ``task.version``: the
    transition table's sources and rule, and nothing changed since the read."""
    conditions = [
        T.id == task.id,
        T.version == task.version,
        status_in(step.sources),
        T.approval_rule.is_not(None),
    ]
    return await update_task_if(conn, conditions, values, now=now)


async def insert_vote(conn: AsyncConnection, task_id: uuid.UUID, vote: Vote) -> bool:
    """Record ``vote``; ``False`` when the person already has a live vote at its stage (the
    transaction stays usable: the insert runs in a savepoint)."""
    try:
        async with conn.begin_nested():
            await conn.execute(
                task_votes.insert().values(
                    id=uuid.uuid4(),
                    task_id=task_id,
                    stage=vote.stage,
                    voter=vote.voter,
                    voter_key_id=uuid.UUID(vote.key_id),
                    decision=vote.decision.value,
                    notes=vote.notes,
                    revision=vote.revision,
                    digest=vote.digest,
                    door=vote.door,
                    created_at=vote.at,
                )
            )
    except IntegrityError:
        return False
    return True


async def void_votes(
    conn: AsyncConnection, task_id: uuid.UUID, *, now: datetime, reason: str
) -> None:
    """Every live vote on the task stops counting (kept, with the reason)."""
    await conn.execute(
        update(task_votes)
        .where(V.task_id == task_id, V.voided_at.is_(None))
        .values(voided_at=now, void_reason=reason)
    )


async def carry_votes(
    conn: AsyncConnection, task_id: uuid.UUID, *, revision: int, digest: str
) -> None:
    """The live votes now stand for ``revision`` (a change to non-material paths only)."""
    await conn.execute(
        update(task_votes)
        .where(V.task_id == task_id, V.voided_at.is_(None))
        .values(revision=revision, digest=digest)
    )


async def history(conn: AsyncConnection, task_id: uuid.UUID) -> Sequence[dict[str, Any]]:
    """Every vote cast on the task, voided ones too, oldest first."""
    statement = select(task_votes).where(V.task_id == task_id).order_by(V.created_at, V.id)
    return [dict(row._mapping) for row in await conn.execute(statement)]


async def voters(conn: AsyncConnection) -> list[tuple[str, str, Any]]:
    """``(principal_id, role, groups)`` of every enabled reviewer or supervisor account and
    every unrevoked reviewer or supervisor key: the people who may vote."""
    roles = [role.value for role in REVIEWERS]
    rows: list[tuple[str, str, Any]] = []
    for table, live in ((users, users.c.disabled_at), (api_keys, api_keys.c.revoked_at)):
        statement = select(table.c.principal_id, table.c.role, table.c.groups).where(
            live.is_(None), table.c.role.in_(roles)
        )
        rows += [(row[0], row[1], row[2]) for row in await conn.execute(statement)]
    return rows


# --- Named rules ------------------------------------------------------------------------


async def upsert_rule(
    conn: AsyncConnection, *, name: str, rule: dict[str, Any], now: datetime, create: bool
) -> bool:
    """Insert (``create``) or replace a rule; False when it already exists / does not."""
    return await upsert_named(
        conn, approval_rules, name=name, values={"rule": rule}, now=now, create=create
    )


async def find_rule(conn: AsyncConnection, name: str) -> dict[str, Any] | None:
    row = (await conn.execute(select(approval_rules).where(A.name == name))).first()
    return dict(row._mapping) if row else None


async def list_rules(conn: AsyncConnection) -> Sequence[dict[str, Any]]:
    statement = select(approval_rules).order_by(A.name)
    return [dict(r._mapping) for r in await conn.execute(statement)]


async def delete_rule(conn: AsyncConnection, name: str) -> bool:
    statement = delete(approval_rules).where(A.name == name).returning(A.name)
    return (await conn.execute(statement)).first() is not None
