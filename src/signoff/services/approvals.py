"""Use cases of approvals bound to versions (seed ``003``): new revisions of a subject,
the execution gate, per-action completion, source revocation, revision history."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.digests import json_digest
from signoff.domain.revisions import (
    RevisionEffect,
    action_ids,
    changed_paths,
    execution_refusal,
    parse_subject_fields,
    revision_effect,
    source_matches,
    structured_diff,
)
from signoff.domain.states import Action, ExecutionStatus, Role, transition
from signoff.domain.tasks import (
    Principal,
    Task,
    hash_lease_token,
    new_lease_token,
    require_role,
)
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    Forbidden,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    Unprocessable,
    validation_error,
)
from signoff.services import notifications
from signoff.services.common import get_task, parse_task_id, record_transition
from signoff.services.context import ServiceContext
from signoff.store import approvals as store
from signoff.store import tasks as task_store
from signoff.store import trail
from signoff.store.database import UnitOfWork

PRECONDITION_FAILED_HINT = "GET the task for its current ETag and review what changed"


def parse_if_match(header: str | None) -> int:
    """``If-Match: "<revision>"`` (a strong ETag, quotes optional) → the revision number.

    Raises:
        PreconditionRequired: 428 when the header is missing.
        PreconditionFailed: 412 when it names no revision.
    """
    if header is None or not header.strip():
        raise PreconditionRequired(
            "If-Match with the current revision's ETag is required",
            error_code=ErrorCode.PRECONDITION_REQUIRED,
        )
    value = header.strip().removeprefix("W/").strip('"')
    if not value.isdigit():
        raise PreconditionFailed(
            f"If-Match {header!r} names no revision; {PRECONDITION_FAILED_HINT}"
        )
    return int(value)


def _own_task(principal: Principal, task: Task) -> None:
    if task.producer_id != principal.principal_id:
        raise Forbidden("only the producer that escalated the task may do this")


async def _producer_task(ctx: ServiceContext, principal: Principal, raw_task_id: str) -> Task:
    task = await get_task(ctx, principal, raw_task_id)
    _own_task(principal, task)
    return task


async def revise_subject(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, *, if_match: str | None, body: Any
) -> Task:
    """Store a new revision of the subject and apply its effect (seed 003). Omitting
    ``source_revisions`` keeps the previous revision's sources.

    * in review: it becomes current (resolves naming the old one get ``ERR_STALE_REVISION``);
    * approved: the approval is invalidated and the task returns to review — unless the
      change is confined to paths outside ``material_paths``, when the approval is carried
      forward to the new revision (the diff is in the audit trail);
    * revision requested: back to review;
    * executing, completed or rejected: 409.

    Raises:
        PreconditionRequired, PreconditionFailed: ``If-Match`` missing or stale (428/412).
        Conflict: ``ERR_TASK_CONFLICT`` when reopening meets another active task for the
            entity; ``ERR_STATE_CONFLICT`` as above.
    """
    expected = parse_if_match(if_match)
    if not isinstance(body, dict):
        raise validation_error([FieldError("(root)", "must be an object")])
    unknown = sorted(set(body) - {"subject", "source_revisions"})
    if unknown:
        raise validation_error([FieldError(name, "is not allowed here") for name in unknown])
    proposal = parse_subject_fields(body, allow_policy=False)
    if proposal is None:
        raise validation_error([FieldError("subject", "is required")])
    require_role(principal, frozenset({Role.PRODUCER}), "revise subjects")
    task = await _producer_task(ctx, principal, raw_task_id)
    if not task.has_subject:
        raise Conflict("this task has no subject to revise", error_code=ErrorCode.STATE_CONFLICT)
    if task.current_revision != expected:
        raise PreconditionFailed(
            f"revision {expected} is not current (current: {task.current_revision}); "
            + PRECONDITION_FAILED_HINT,
            extra={"current_revision": task.current_revision},
        )
    now = ctx.now()
    digest = json_digest(proposal.subject)
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        previous = await store.find_revision(conn, task.id, expected)
        assert previous is not None  # revisions are immutable and never deleted
        paths = changed_paths(previous["subject"], proposal.subject)
        if "source_revisions" not in body:  # omitted: the sources did not change
            proposal = replace(proposal, source_revisions=list(previous["source_revisions"]))
        sources_changed = previous["source_revisions"] != proposal.source_revisions
        effect = revision_effect(task, paths, now, sources_changed=sources_changed)
        step = transition(_ACTION_FOR[effect])
        revision = expected + 1
        if not await store.insert_revision(
            conn,
            task_id=task.id,
            revision=revision,
            subject=proposal.subject,
            digest=digest,
            source_revisions=proposal.source_revisions,
            created_by=principal.principal_id,
            now=now,
        ):
            raise PreconditionFailed(
                f"revision {revision} was just created by someone else; {PRECONDITION_FAILED_HINT}"
            )
        values: dict[str, Any] = {"current_revision": revision, "digest": digest}
        if effect is RevisionEffect.CARRY_FORWARD:
            values |= {"approved_revision": revision, "approved_digest": digest}
        elif effect in (RevisionEffect.INVALIDATE_APPROVAL, RevisionEffect.REOPEN_FOR_REVISION):
            values |= _REOPENED
        if effect is RevisionEffect.INVALIDATE_APPROVAL:
            # Remembered so an execute naming this revision is told why precisely.
            values["invalidated_revision"] = task.approved_revision
        try:
            updated = await store.apply_revision(conn, step, task, values, now)
        except store.ActiveTaskExists:
            active = await task_store.find_active_task_for_entity(
                conn, task.entity_type, task.entity_id
            )
            # Another producer's task ids are not this producer's to learn.
            mine = active is not None and active.producer_id == task.producer_id
            raise Conflict(
                f"another active task for {task.entity_type}/{task.entity_id} exists; "
                "this one cannot reopen",
                error_code=ErrorCode.TASK_CONFLICT,
                extra={"task_id": str(active.id)} if mine and active else {},
            ) from None
        if updated is None:
            raise PreconditionFailed(f"the task changed while revising; {PRECONDITION_FAILED_HINT}")
        details: dict[str, Any] = {
            "revision": revision,
            "digest": digest,
            "previous_revision": expected,
            "changed_paths": paths,
            "sources_changed": sources_changed,
            "effect": effect.value,
        }
        if effect in (RevisionEffect.INVALIDATE_APPROVAL, RevisionEffect.REOPEN_FOR_REVISION):
            # The decision being cleared stays readable, notes included (the console shows
            # a reviewer their own earlier notes beside the diff).
            details["previous_decision"] = {
                "decision": task.decision,
                "notes": task.notes,
                "by": task.operator_id,
                "revision": expected,
            }
        if effect is RevisionEffect.INVALIDATE_APPROVAL:
            details |= {
                "reason": "the subject changed after approval",
                "invalidated_approval": {
                    "revision": task.approved_revision,
                    "digest": task.approved_digest,
                    "approved_by": task.operator_id,
                    "approved_at": rfc3339(task.resolved_at),
                },
            }
        if effect is RevisionEffect.CARRY_FORWARD:
            details["diff"] = structured_diff(
                previous["subject"],
                proposal.subject,
                previous["source_revisions"],
                proposal.source_revisions,
            )
        await record_transition(uow, step, updated, principal, now, details)
        if effect is RevisionEffect.INVALIDATE_APPROVAL:
            # The approver and the task's group learn that the approval no longer holds,
            # with a fresh link to the new revision.
            targets = [f"principal:{task.operator_id}"] if task.operator_id else []
            if updated.assigned_group:
                targets.append(f"group:{updated.assigned_group}")
            await notifications.notify(
                uow, ctx, updated, kind="approval_invalidated", targets=targets, now=now
            )
        await uow.commit()
    return updated


_ACTION_FOR = {
    RevisionEffect.KEEP_REVIEWING: Action.REVISE,
    RevisionEffect.CARRY_FORWARD: Action.CARRY_FORWARD,
    RevisionEffect.INVALIDATE_APPROVAL: Action.REOPEN,
    RevisionEffect.REOPEN_FOR_REVISION: Action.REOPEN,
}

#: Back to review: the decision and the approval binding are cleared (they stay in the
#: audit trail, with the reason).
_REOPENED: dict[str, Any] = {
    "status": "PENDING_REVIEW",
    "decision": None,
    "notes": None,
    "resolution_payload": None,
    "operator_id": None,
    "resolved_at": None,
    "claimed_by": None,
    "lease_token_hash": None,
    "lease_expires_at": None,
    "approved_revision": None,
    "approved_digest": None,
    "approval_expires_at": None,
    "approver_key_id": None,
}


@dataclass(frozen=True)
class ExecutionGrant:
    """A grant with its execution token (shown only here), or the stored outcome of a
    completed execution (``token`` ``None``)."""

    task: Task
    operation_id: str
    actions: list[dict[str, Any]]
    token: str | None = None


async def execute(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    *,
    revision: int,
    digest: str,
    operation_id: str,
) -> ExecutionGrant:
    """The execution gate (seed 003): one atomic check, one winner, fenced by an execution
    lease with its own token (rotated on every grant, stored hashed).

    While the lease lives every other execute is refused, whatever its ``operation_id``; a
    lapsed lease (the executor crashed) can be taken by a new execute, which keeps the
    actions already completed. A completed execution asked again with its ``operation_id``
    returns its stored outcome, never a fresh grant. Every refusal for the approval's sake
    is written to the audit trail, next to the decision it does not erase.

    Raises:
        Conflict: ``ERR_ALREADY_EXECUTING`` (with ``lease_expires_at`` while a lease
            lives), or ``ERR_APPROVAL_NOT_VALID`` with ``reason`` (see
            :class:`signoff.domain.decisions.RefusalReason`).
    """
    step = transition(Action.EXECUTE)
    require_role(principal, step.roles, "execute approved tasks")
    task_id = parse_task_id(raw_task_id)
    now = ctx.now()
    token = new_lease_token()
    lease_expires_at = now + timedelta(seconds=ctx.settings.execution_lease_seconds)
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        granted = await store.grant_execution(
            conn,
            step,
            task_id,
            producer_id=principal.principal_id,
            revision=revision,
            digest=digest,
            operation_id=operation_id,
            token_hash=hash_lease_token(token),
            lease_expires_at=lease_expires_at,
            now=now,
        )
        if granted is not None:
            revision_row = await store.find_revision(conn, task_id, revision)
            assert revision_row is not None
            await store.insert_actions(conn, task_id, action_ids(revision_row["subject"]), now)
            await record_transition(
                uow,
                step,
                granted,
                principal,
                now,
                {
                    "operation_id": operation_id,
                    "revision": revision,
                    "execution_lease_expires_at": rfc3339(lease_expires_at),
                },
            )
            actions = await store.list_actions(conn, task_id)
            await uow.commit()
            return ExecutionGrant(
                task=granted, operation_id=operation_id, actions=actions, token=token
            )
        current = await task_store.find_task(conn, task_id)
        if current is None or current.producer_id != principal.principal_id:
            raise NotFound(
                f"task {raw_task_id} does not exist", error_code=ErrorCode.TASK_NOT_FOUND
            )
        if current.execution_status == ExecutionStatus.COMPLETED.value:
            actions = await store.list_actions(conn, task_id)
            ran = {current.execution_operation_id} | {a["operation_id"] for a in actions}
            if operation_id in ran:
                return ExecutionGrant(task=current, operation_id=operation_id, actions=actions)
            raise Conflict(
                f"task {task_id} was already executed under another operation",
                error_code=ErrorCode.ALREADY_EXECUTING,
                extra={"execution_status": current.execution_status},
            )
        lease = current.execution_lease_expires_at
        if current.execution_token_hash is not None and lease is not None and lease > now:
            raise Conflict(
                f"task {task_id} is being executed; its execution lease lapses at {rfc3339(lease)}",
                error_code=ErrorCode.ALREADY_EXECUTING,
                extra={"lease_expires_at": rfc3339(lease)},
            )
        reason = execution_refusal(
            current,
            revision=revision,
            digest=digest,
            now=now,
            approver_authorised=await store.approver_authorised(conn, task_id),
            source_revoked=await store.any_source_revoked(conn, task_id),
        )
        if reason is None:  # the state moved between the gate and this read; it refused
            raise Conflict(
                f"task {task_id} changed concurrently; retry", error_code=ErrorCode.STATE_CONFLICT
            )
        await trail.append_audit_event(
            conn,
            task_id=task_id,
            event_type="task.execution_refused",
            action=step.action.value,
            status=current.status.value,
            version=current.version,
            actor_id=principal.principal_id,
            actor_role=principal.role.value,
            details={
                "reason": reason.value,
                "operation_id": operation_id,
                "revision": revision,
                "digest": digest,
            },
            now=now,
        )
        await uow.commit()
    raise Conflict(
        f"the approval does not allow execution: {reason.value}",
        error_code=ErrorCode.APPROVAL_NOT_VALID,
        extra={"reason": reason.value},
    )


def _lease_lost(task_id: uuid.UUID) -> Conflict:
    return Conflict(
        f"the execution token is not the live execution lease of task {task_id}: it lapsed, "
        "was taken over by a new grant, or the execution ended",
        error_code=ErrorCode.EXECUTION_LEASE_LOST,
    )


async def renew_execution(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, execution_token: str
) -> Task:
    """Extend the execution lease by ``SIGNOFF_EXECUTION_LEASE_SECONDS`` from now. A lapsed
    lease still renews while nobody took the execution over (its token is current).

    Raises:
        Conflict: ``ERR_EXECUTION_LEASE_LOST``.
    """
    step = transition(Action.RENEW_EXECUTION)
    require_role(principal, step.roles, "renew execution leases")
    task = await _producer_task(ctx, principal, raw_task_id)
    now = ctx.now()
    expires_at = now + timedelta(seconds=ctx.settings.execution_lease_seconds)
    async with ctx.database.transaction() as uow:
        renewed = await store.renew_execution(
            uow.connection,
            step,
            task.id,
            producer_id=principal.principal_id,
            token_hash=hash_lease_token(execution_token),
            lease_expires_at=expires_at,
            now=now,
        )
        if renewed is None:
            raise _lease_lost(task.id)
        await record_transition(
            uow, step, renewed, principal, now, {"execution_lease_expires_at": rfc3339(expires_at)}
        )
        await uow.commit()
    return renewed


async def finish_action(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    action_id: str,
    *,
    succeeded: bool,
    operation_id: str,
    result: Any,
    execution_token: str,
) -> dict[str, Any]:
    """Mark one action completed or failed under the live execution lease, idempotently by
    ``operation_id`` (repeating a recorded report returns it, whatever the lease). A failed
    action may be completed later (retried alone); a completed one never changes. The
    task's execution status follows: COMPLETED when all actions are, FAILED if any failed.
    Once no action is pending the execution lease ends.

    Raises:
        NotFound: ``ERR_ACTION_NOT_FOUND``.
        Conflict: ``ERR_EXECUTION_LEASE_LOST`` (the token is not the live lease);
            ``ERR_STATE_CONFLICT`` when the action is already completed under another
            operation.
    """
    step = transition(Action.COMPLETE_ACTION if succeeded else Action.FAIL_ACTION)
    require_role(principal, step.roles, "report actions")
    task = await _producer_task(ctx, principal, raw_task_id)
    status = ExecutionStatus.COMPLETED if succeeded else ExecutionStatus.FAILED
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        # Concurrent reports for different actions must each see the others' results,
        # or the overall status is computed from a stale snapshot and never completes;
        # the lock is taken only under the live lease, so the check and the write are one.
        held = await store.lock_live_execution(
            conn, task.id, token_hash=hash_lease_token(execution_token), now=now
        )
        actions = {a["action_id"]: a for a in await store.list_actions(conn, task.id)}
        if action_id not in actions:
            raise NotFound(
                f"task {task.id} has no action {action_id!r}", error_code=ErrorCode.ACTION_NOT_FOUND
            )
        existing = actions[action_id]
        if existing["operation_id"] == operation_id and existing["status"] == status.value:
            current = await task_store.find_task(conn, task.id) or task
            # A failure recorded before the live grant is not this report: a retry of the
            # action under a new grant failed again, and the execution must end FAILED.
            retried = (
                held
                and status is ExecutionStatus.FAILED
                and current.executed_at is not None
                and existing["updated_at"] < current.executed_at
            )
            if not retried:
                return _execution_view(current, list(actions.values()))
        if not held:
            raise _lease_lost(task.id)
        changed = await store.set_action_status(
            conn,
            task_id=task.id,
            action_id=action_id,
            status=status,
            operation_id=operation_id,
            result=result,
            now=now,
        )
        if not changed:
            raise Conflict(
                f"action {action_id!r} is {existing['status']} "
                f"under operation {existing['operation_id']!r}",
                error_code=ErrorCode.STATE_CONFLICT,
            )
        latest = await store.list_actions(conn, task.id)
        states = {a["status"] for a in latest}
        overall = (
            ExecutionStatus.COMPLETED
            if states == {"COMPLETED"}
            else ExecutionStatus.FAILED
            if "FAILED" in states
            else ExecutionStatus.EXECUTING
        )
        updated = await store.set_execution_status(
            conn, task.id, overall, now, end_lease="PENDING" not in states
        )
        await record_transition(
            uow,
            step,
            updated,
            principal,
            now,
            {
                "action_id": action_id,
                "operation_id": operation_id,
                "result": result,
                "execution_status": overall.value,
            },
        )
        await uow.commit()
    return _execution_view(updated, latest)


async def report_stalled_executions(
    uow: UnitOfWork, actor: Principal, *, now: datetime, limit: int
) -> int:
    """The sweeper's part: raise ``task.execution_stalled`` (audit and webhook event) for
    each execution lease that lapsed without an outcome, once per lapse. Returns how many."""
    step = transition(Action.EXECUTION_STALLED)
    stalled = await store.mark_stalled_executions(uow.connection, step, now=now, limit=limit)
    for task in stalled:
        await record_transition(
            uow,
            step,
            task,
            actor,
            now,
            {
                "operation_id": task.execution_operation_id,
                "execution_lease_expired_at": rfc3339(task.execution_lease_expires_at),
            },
        )
    return len(stalled)


def _execution_view(task: Task, actions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "task_id": str(task.id),
        "execution_status": task.execution_status,
        "operation_id": task.execution_operation_id,
        "actions": [
            {
                "id": a["action_id"],
                "status": a["status"],
                "operation_id": a["operation_id"],
                "result": a["result"],
            }
            for a in actions
        ],
    }


def grant_view(grant: ExecutionGrant) -> dict[str, Any]:
    """A grant with its token and lease, or a completed execution's outcome (no token)."""
    task = grant.task
    leased = grant.token is not None
    return {
        **_execution_view(task, grant.actions),
        "revision": task.current_revision,
        "digest": task.digest,
        "approved_by": task.operator_id,
        "granted_at": rfc3339(task.executed_at),
        "execution_token": grant.token,
        "execution_lease_expires_at": rfc3339(task.execution_lease_expires_at) if leased else None,
    }


def execution_lease_view(task: Task) -> dict[str, Any]:
    return {
        "task_id": str(task.id),
        "execution_status": task.execution_status,
        "operation_id": task.execution_operation_id,
        "execution_lease_expires_at": rfc3339(task.execution_lease_expires_at),
    }


async def revoke_source(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, source_id: str
) -> dict[str, Any]:
    """Mark a source revoked (``S01`` or ``S01:r7``); approvals relying on it cannot execute.

    Raises:
        NotFound: ``ERR_SOURCE_NOT_FOUND`` when the current revision names no such source.
    """
    step = transition(Action.REVOKE_SOURCE)
    require_role(principal, step.roles, "revoke sources")
    task = await _producer_task(ctx, principal, raw_task_id)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        current = await store.find_revision(uow.connection, task.id, task.current_revision or 0)
        sources = current["source_revisions"] if current else []
        if not any(source_matches(entry, source_id) for entry in sources):
            raise NotFound(
                f"the current revision names no source {source_id!r}",
                error_code=ErrorCode.SOURCE_NOT_FOUND,
            )
        if await store.revoke_source(
            uow.connection, task_id=task.id, source_id=source_id, by=principal.principal_id, now=now
        ):
            revoked = await store.new_task_version(uow.connection, task.id, now)
            await record_transition(uow, step, revoked, principal, now, {"source_id": source_id})
            await uow.commit()
    return {"task_id": str(task.id), "source_id": source_id, "revoked": True}


async def list_revisions(
    ctx: ServiceContext, principal: Principal, raw_task_id: str
) -> list[dict[str, Any]]:
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        return [dict(r) for r in await store.list_revisions(uow.connection, task.id)]


async def get_revision(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, revision: int
) -> dict[str, Any]:
    """One revision; reading it counts as having viewed it (for "changed since you looked")."""
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction() as uow:
        row = await store.find_revision(uow.connection, task.id, revision)
        if row is None:
            raise NotFound(
                f"task {task.id} has no revision {revision}",
                error_code=ErrorCode.REVISION_NOT_FOUND,
            )
        if principal.role is not Role.PRODUCER:
            await store.record_view(
                uow.connection,
                task_id=task.id,
                principal_id=principal.principal_id,
                revision=revision,
                now=ctx.now(),
            )
        await uow.commit()
    return row


async def diff(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, start: int, end: int
) -> dict[str, Any]:
    """Structured diff between two revisions (JSON Pointer paths, line diffs for long
    strings, and which sources changed)."""
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        old = await store.find_revision(uow.connection, task.id, start)
        new = await store.find_revision(uow.connection, task.id, end)
    missing = [
        FieldError(name, "no such revision")
        for name, row in (("from", old), ("to", new))
        if row is None
    ]
    if missing:
        raise Unprocessable("unknown revision", error_code=ErrorCode.VALIDATION, errors=missing)
    assert old is not None
    assert new is not None
    return {
        "from": start,
        "to": end,
        **structured_diff(
            old["subject"], new["subject"], old["source_revisions"], new["source_revisions"]
        ),
    }


async def note_view(ctx: ServiceContext, principal: Principal, task: Task) -> int | None:
    """Record that a reviewer looked at the task's current revision; returns the revision
    they had seen before (``None``: never)."""
    if principal.role is Role.PRODUCER or not task.has_subject:
        return None
    async with ctx.database.transaction() as uow:
        previous = await store.record_view(
            uow.connection,
            task_id=task.id,
            principal_id=principal.principal_id,
            revision=int(task.current_revision or 0),
            now=ctx.now(),
        )
        await uow.commit()
    return previous
