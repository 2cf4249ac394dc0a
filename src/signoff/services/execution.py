"""The execution gate of approvals bound to versions: one winner per approval, fenced by
an execution lease; per-action completion; stalled executions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.revisions import action_ids, execution_refusal
from signoff.domain.states import Action, ExecutionStatus, transition
from signoff.domain.tasks import (
    Principal,
    Task,
    hash_lease_token,
    new_lease_token,
    require_role,
)
from signoff.errors import Conflict, ErrorCode, NotFound
from signoff.services.common import parse_task_id, producer_task, record_transition
from signoff.services.context import ServiceContext
from signoff.store import approvals as store
from signoff.store import tasks as task_store
from signoff.store import trail
from signoff.store.runtime.database import UnitOfWork


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
    """The execution gate: one atomic check, one winner, fenced by an execution
    lease with its own token (rotated on every grant, stored hashed).

    While the lease lives every execute under another ``operation_id`` is refused; the
    same ``operation_id`` asked again (its answer was lost, or its executor restarted)
    takes the lease over with a new token, fencing the old one. A lapsed lease (the
    executor crashed) can be taken by any new execute. Both keep the actions already
    completed. A completed execution asked again with its ``operation_id``
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
    task = await producer_task(ctx, principal, raw_task_id)
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
    task = await producer_task(ctx, principal, raw_task_id)
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
