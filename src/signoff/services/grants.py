"""Remembered approvals (:mod:`signoff.domain.grants`): the escalation's one lookup and
the approval it gives, a reviewer's grant made with their approval, and an admin's grants
(created, listed, revoked).

A grant revoked while a matching escalation arrives: on PostgreSQL the escalation's read
locks the grants it considers (shared) until it commits, and a revocation waits for it (or
the escalation waits for the revocation and sees the grant revoked); SQLite writes one
transaction at a time. Either way an approval made by a grant that is revoked afterwards
does not open the execution gate (:func:`signoff.store.approvals.grant_execution`).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from signoff.domain.decisions import rule_for
from signoff.domain.grants import Grant, checked_scope, checked_seconds, sampled
from signoff.domain.states import Decision, Role, TaskStatus
from signoff.domain.tasks import Principal, Task, require_role
from signoff.errors import ErrorCode, FieldError, NotFound, validation_error
from signoff.services.context import ServiceContext
from signoff.store import grants as store
from signoff.store import tasks as task_store
from signoff.store.runtime.database import UnitOfWork

ADMINS = frozenset({Role.ADMIN})
OVERSEERS = frozenset({Role.ADMIN, Role.SUPERVISOR})


async def matching(uow: UnitOfWork, ctx: ServiceContext, task: Task, subject: Any) -> Grant | None:
    """The live grant that covers a new task with a subject (not for a task decided by
    votes), or ``None``: one indexed read."""
    if task.digest is None or task.approval_rule is not None:
        return None
    candidates = await store.live_candidates(
        uow.connection,
        producer_id=task.producer_id,
        entity_type=task.entity_type,
        reason_code=task.reason_code,
        digest=task.digest,
        now=task.created_at,
    )
    return next((g for g in candidates if g.covers(subject, task.digest)), None)


def audited(ctx: ServiceContext) -> bool:
    """Whether this matching escalation goes to a person anyway (the sampled share)."""
    return sampled(ctx.settings.grant_audit_share, random.random())  # noqa: S311 - a sample


def approved_by(task: Task, grant: Grant, ttl: int | None) -> Task:
    """``task`` (new, pending) as the grant approves it: what the escalation answers."""
    expires = task.created_at + timedelta(seconds=ttl) if ttl else None
    return replace(
        task,
        status=TaskStatus.RESOLVED,
        decision=Decision.APPROVED_BY_GRANT.value,
        operator_id=grant.created_by,
        resolved_at=task.created_at,
        approved_revision=task.current_revision,
        approved_digest=task.digest,
        approval_expires_at=expires,
        approver_key_id=grant.created_by_key_id,
        grant_id=grant.id,
        version=task.version + 1,
    )


def approval_values(approved: Task) -> dict[str, Any]:
    names = (
        "status", "decision", "operator_id", "resolved_at", "approved_revision",
        "approved_digest", "approval_expires_at", "approver_key_id", "grant_id",
    )  # fmt: skip
    values = {name: getattr(approved, name) for name in names}
    values["status"] = approved.status.value
    return values


async def checked_remember(
    ctx: ServiceContext, decision: Decision, task_id: uuid.UUID, seconds: object
) -> int | None:
    """How long the grant a reviewer asks for with this decision lasts (``None``: none).

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``remember_seconds``: out of range, not
            with an approval, or on a task without a subject or decided by votes.
    """
    if seconds is None:
        return None
    lasting = checked_seconds(seconds, ctx.settings.max_grant_seconds)
    if not rule_for(decision).grants_approval:
        problem = f"is only for an approval, not to {rule_for(decision).verb}"
        raise validation_error([FieldError("remember_seconds", problem)])
    async with ctx.database.transaction(write=False) as uow:
        task = await task_store.find_task(uow.connection, task_id)
    if task is not None and (task.current_revision is None or task.approval_rule is not None):
        problem = "needs a task with a subject, decided by one person"
        raise validation_error([FieldError("remember_seconds", problem)])
    return lasting


async def create(ctx: ServiceContext, principal: Principal, body: Any) -> Grant:
    """An admin's grant, as a policy: producer, entity type, reason, and a digest or
    conditions, for ``seconds``.

    Raises:
        Forbidden: not an admin. Unprocessable: ``ERR_VALIDATION`` naming the field.
    """
    require_role(principal, ADMINS, "create remembered approvals")
    if not isinstance(body, dict):
        raise validation_error([FieldError("(root)", "must be an object")])
    allowed = {"producer_id", "entity_type", "reason_code", "digest", "conditions"}
    unknown = sorted(set(body) - allowed - {"seconds", "note"})
    problems = [FieldError(name, "is not allowed here") for name in unknown]
    for name in ("producer_id", "entity_type", "reason_code"):
        if not isinstance(body.get(name), str) or not body[name].strip():
            problems.append(FieldError(name, "is required (text)"))
    note = body.get("note")
    if note is not None and (not isinstance(note, str) or len(note) > 1000):
        problems.append(FieldError("note", "must be text of at most 1,000 characters"))
    if problems:
        raise validation_error(problems)
    digest, conditions = checked_scope(body)
    lasting = checked_seconds(body.get("seconds"), ctx.settings.max_grant_seconds, "seconds")
    now = ctx.now()
    grant = Grant(
        id=uuid.uuid4(),
        producer_id=body["producer_id"],
        entity_type=body["entity_type"],
        reason_code=body["reason_code"],
        digest=digest,
        conditions=conditions,
        created_by=principal.principal_id,
        created_by_key_id=None,
        source_task_id=None,
        note=note,
        created_at=now,
        expires_at=now + timedelta(seconds=lasting),
    )
    async with ctx.database.transaction() as uow:
        await store.insert_grant(uow.connection, grant)
        await uow.commit()
    return grant


async def listed(ctx: ServiceContext, principal: Principal) -> Sequence[Grant]:
    """Every grant, newest first (admins and supervisors)."""
    require_role(principal, OVERSEERS, "list remembered approvals")
    async with ctx.database.transaction(write=False) as uow:
        return await store.list_grants(uow.connection)


async def revoke(ctx: ServiceContext, principal: Principal, raw_id: str) -> Grant:
    """Revoke a grant: admins, supervisors, and the reviewer who made it. Matching
    escalations then go to a person, and tasks it approved no longer execute.

    Raises:
        NotFound: ``ERR_GRANT_NOT_FOUND`` (unknown, or not the caller's to revoke).
    """
    try:
        grant_id = uuid.UUID(raw_id)
    except ValueError:
        raise _not_found(raw_id) from None
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        found = await store.find_grant(uow.connection, grant_id)
        mine = found is not None and found.created_by == principal.principal_id
        if found is None or not (principal.role in OVERSEERS or mine):
            raise _not_found(raw_id)
        revoked = await store.revoke_grant(
            uow.connection, grant_id, by=principal.principal_id, now=now
        )
        await uow.commit()
    return revoked or found


def _not_found(raw_id: str) -> NotFound:
    return NotFound(f"remembered approval {raw_id} not found", error_code=ErrorCode.GRANT_NOT_FOUND)
