"""Write transactions through SQLAlchemy Core, on either engine.

SQLite's lease changes and decisions are these transactions (one writer, no round trips
to save); PostgreSQL records here the decision its single statement refused, so that
the refusal is explained (or an identical repeat recognised) from this transaction's
own read. Each is a conditional update (:mod:`signoff.store.tasks`) followed, in the
same transaction, by its events (:func:`signoff.store.trail.append_transition`); one
that matched nothing reads the task back in that transaction to say why.

Also here: what both engines' one-step escalations share (their parameters and the
reading of their answer).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.clock import rfc3339
from signoff.domain.decisions import rule_for
from signoff.domain.grants import remembered_approval
from signoff.domain.states import Action, transition
from signoff.domain.tasks import Task
from signoff.store import approvals as approval_store
from signoff.store import grants as grant_store
from signoff.store import oneshot, trail
from signoff.store import tasks as task_store
from signoff.store.idempotency import StoredIdempotencyKey
from signoff.store.protocols import WritingDatabase
from signoff.store.writes import (
    Escalation,
    EscalationRecord,
    Lease,
    OverLimit,
    Refusal,
    Resolution,
)


def escalation_params(escalation: Escalation) -> dict[str, Any]:
    """The one-step escalation's parameters by name: those of
    :data:`signoff.store.oneshot.ESCALATE`, which :func:`signoff.store.lite.escalate`
    takes too."""
    e = escalation
    values = oneshot.task_params(e.task, e.idempotency_key)
    values |= {
        "actor": e.principal.principal_id,
        "actor_role": e.principal.role.value,
        "key": e.idempotency_key,
        "fingerprint": e.fingerprint,
        "response": e.response,
        "now": e.now,
        "expires_at": e.expires_at,
        "details": e.details,
        "event_id": e.event_id,
        "payload": e.payload,
    }
    return values


def escalation_record(
    database: WritingDatabase, escalation: Escalation, record: Mapping[str, Any]
) -> EscalationRecord:
    """A one-step escalation's answer (the columns of ``ESCALATE``'s); a created task wakes
    this process's dispatcher and the task's waiters."""
    if record["created"]:
        database.after_commit([escalation.task.id], wrote_outbox=True)
        return EscalationRecord(created=True)
    if record["request_fingerprint"] is None:
        return EscalationRecord(created=False)
    stored = StoredIdempotencyKey(
        request_fingerprint=record["request_fingerprint"],
        task_id=record["task_id"],
        response_status=record["response_status"],
        response_body=record["response_body"],
        expires_at=record["expires_at"],
    )
    return EscalationRecord(created=False, stored=stored)


async def refusing_task(conn: AsyncConnection, task: Task) -> Mapping[str, Any] | None:
    """The task that refused ``task`` (the unique rules of ``review_tasks``): the task with
    its id, else the entity's active task; as :class:`~signoff.store.writes.TaskRefused`
    carries it. ``None``: neither exists (any more)."""
    existing = await task_store.find_task(conn, task.id)
    same_id = existing is not None
    if existing is None:
        existing = await task_store.find_active_task_for_entity(
            conn, task.entity_type, task.entity_id
        )
    if existing is None:
        return None
    return {"id": existing.id, "producer_id": existing.producer_id, "same_id": same_id}


async def current_task(database: WritingDatabase, task_id: uuid.UUID) -> Refusal:
    """A refused change's task, read in a transaction of its own."""
    async with database.transaction(write=False) as uow:
        return Refusal(await task_store.find_task(uow.connection, task_id))


async def claim(
    database: WritingDatabase, lease: Lease, task_id: uuid.UUID, *, limit: int
) -> Task | OverLimit | Refusal:
    step = transition(Action.CLAIM)
    principal, now = lease.principal, lease.now
    async with database.transaction() as uow:
        live = await task_store.count_live_leases(
            uow.connection, principal.principal_id, now=now, exclude=task_id
        )
        if live >= limit:
            return OverLimit(live)
        task = await task_store.claim_task(
            uow.connection,
            step,
            task_id,
            operator_id=principal.principal_id,
            lease_token_hash=lease.token_hash,
            now=now,
            lease_expires_at=lease.expires_at,
            groups=lease.groups,
        )
        if task is None:
            return Refusal(await task_store.find_task(uow.connection, task_id))
        await trail.append_transition(uow, step, task, principal, now)
        await uow.commit()
    return task


async def claim_next(
    database: WritingDatabase,
    lease: Lease,
    *,
    limit: int,
    entity_type: str | None,
    reason_code: str | None,
) -> Task | OverLimit | None:
    step = transition(Action.CLAIM)
    principal, now = lease.principal, lease.now
    async with database.transaction() as uow:
        live = await task_store.count_live_leases(uow.connection, principal.principal_id, now=now)
        if live >= limit:
            return OverLimit(live)
        task = await task_store.claim_next_claimable(
            uow.connection,
            step,
            operator_id=principal.principal_id,
            lease_token_hash=lease.token_hash,
            now=now,
            lease_expires_at=lease.expires_at,
            entity_type=entity_type,
            reason_code=reason_code,
            groups=lease.groups,
        )
        if task is None:
            return None
        await trail.append_transition(uow, step, task, principal, now)
        await uow.commit()
    return task


def takes_up_lapsed_lease(task: Task | None, lease: Lease) -> bool:
    """Whether renewing under ``lease`` would take up again a lease of the principal's
    that has lapsed (which counts against the claim limit, as a claim does)."""
    return (
        task is not None
        and task.claimed_by == lease.principal.principal_id
        and task.lease_token_hash == lease.token_hash
        and task.lease_lapsed(lease.now)
    )


async def _over_limit(
    conn: AsyncConnection, lease: Lease, task_id: uuid.UUID, limit: int
) -> OverLimit | None:
    live = await task_store.count_live_leases(
        conn, lease.principal.principal_id, now=lease.now, exclude=task_id
    )
    return OverLimit(live) if live >= limit else None


async def renew_refused(
    database: WritingDatabase, lease: Lease, task_id: uuid.UUID, *, limit: int
) -> OverLimit | Refusal:
    """Why a renewal matched nothing: the claim limit, when it would have taken up a
    lapsed lease and the principal holds ``limit`` other live leases; else the task as
    it is now."""
    async with database.transaction(write=False) as uow:
        current = await task_store.find_task(uow.connection, task_id)
        if takes_up_lapsed_lease(current, lease):
            over = await _over_limit(uow.connection, lease, task_id, limit)
            if over is not None:
                return over
    return Refusal(current)


async def change_held_lease(
    database: WritingDatabase,
    lease: Lease,
    task_id: uuid.UUID,
    action: Action,
    *,
    limit: int | None = None,
) -> Task | OverLimit | Refusal:
    """Renew (a new expiry) or release (back to the queue) the lease ``lease`` holds.
    ``limit``: renewing a lapsed lease counts against it, in the same write transaction
    (``BEGIN IMMEDIATE`` on SQLite) as the change."""
    step = transition(action)
    values = (
        {"lease_expires_at": lease.expires_at}
        if action is Action.RENEW
        else dict(task_store.LEASE_CLEARED)
    )
    principal, now = lease.principal, lease.now
    async with database.transaction() as uow:
        if limit is not None:
            current = await task_store.find_task(uow.connection, task_id)
            if takes_up_lapsed_lease(current, lease):
                over = await _over_limit(uow.connection, lease, task_id, limit)
                if over is not None:
                    return over
        task = await task_store.update_held_task(
            uow.connection,
            step,
            task_id,
            holder=principal.principal_id,
            lease_token_hash=lease.token_hash,
            now=now,
            values=values | ({"status": step.target.value} if step.target else {}),
        )
        if task is None:
            return Refusal(await task_store.find_task(uow.connection, task_id))
        details = (
            {"lease_expires_at": rfc3339(task.lease_expires_at)} if task.lease_expires_at else {}
        )
        await trail.append_transition(uow, step, task, principal, now, details)
        await uow.commit()
    return task


async def resolve(
    database: WritingDatabase, lease: Lease, task_id: uuid.UUID, resolution: Resolution
) -> Task | Refusal:
    step = transition(Action.RESOLVE)
    principal, now, decision = lease.principal, lease.now, resolution.decision
    async with database.transaction() as uow:
        task = await task_store.resolve_task(
            uow.connection,
            step,
            task_id,
            holder=principal.principal_id,
            holder_key_id=principal.key_id,
            lease_token_hash=lease.token_hash,
            now=now,
            decision=decision,
            notes=resolution.notes,
            resolution_payload=resolution.resolution_payload,
            change_request=resolution.change_request,
            revision=resolution.revision,
            digest=resolution.digest,
            edit=resolution.edit.values() if resolution.edit else None,
        )
        if task is None:
            return Refusal(await task_store.find_task(uow.connection, task_id))
        edit = resolution.edit
        if edit is not None:
            # The reviewer's edit: a revision of their own, the one the approval binds.
            stored = await approval_store.insert_revision(
                uow.connection,
                task_id=task.id,
                revision=edit.revision,
                subject=edit.subject,
                digest=edit.digest,
                source_revisions=edit.source_revisions,
                created_by=principal.principal_id,
                now=now,
            )
            if not stored:  # the row lock makes this unreachable; refuse rather than guess
                raise RuntimeError(f"revision {edit.revision} of task {task.id} exists")
        if rule_for(decision).grants_approval and task.has_subject:
            ttl = task.approval_ttl_seconds or resolution.approval_ttl_seconds
            if ttl is not None:
                expires_at = now + timedelta(seconds=ttl)
                await approval_store.set_approval_expiry(uow.connection, task.id, expires_at)
                task = replace(task, approval_expires_at=expires_at)
        details: dict[str, Any] = {"decision": decision.value, "door": resolution.door}
        if task.has_subject:
            details |= {"revision": task.current_revision, "digest": task.digest}
        if resolution.fields:  # what the reviewer asked to change, and why
            details["fields"] = resolution.fields
        if resolution.remember_seconds is not None and task.approved_digest is not None:
            grant = remembered_approval(
                task,
                by=principal.principal_id,
                key_id=principal.key_id,
                seconds=resolution.remember_seconds,
                now=now,
            )
            await grant_store.insert_grant(uow.connection, grant)
            details["remembered"] = grant.cited()
        if edit is not None:
            details["edited"] = {
                "from_revision": resolution.revision,
                "from_digest": resolution.digest,
                "changed_paths": edit.changed_paths,
            }
        await trail.append_transition(uow, step, task, principal, now, details)
        await uow.commit()
    return task
