"""Waiting with deadlines: escalation levels applied once each by the sweeper (remind,
reassign, expire), and the producer's cancellation. Waiting is a stored state with a
deadline; no worker ever blocks."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.exc import DBAPIError

from signoff.domain.policies import TIMEOUT_NOTES, LevelAction, policy_from_json
from signoff.domain.states import Action, Decision, Role, transition
from signoff.domain.tasks import Principal, Task, require_role
from signoff.errors import Conflict, ErrorCode
from signoff.services import execution
from signoff.services.common import get_task, record_transition
from signoff.services.context import ServiceContext
from signoff.services.notifications import notify
from signoff.store import tasks as task_store
from signoff.store import waiting as store
from signoff.store.idempotency import purge_expired_idempotency_keys
from signoff.store.runtime.database import UnitOfWork
from signoff.store.tasks import LEASE_CLEARED

log = structlog.get_logger("signoff.waiting")

SYSTEM_PRINCIPAL = Principal(
    key_id=uuid.UUID(int=0), principal_id="signoff-sweeper", role=Role.SYSTEM
)


async def apply_due_level(
    uow: UnitOfWork, ctx: ServiceContext, task: Task, now: datetime
) -> Task | None:
    """Apply the task's next escalation level, exactly once: the update only matches while
    the task is still at its current level, waiting, and due. ``None`` when another
    sweeper (or a decision) got there first."""
    policy = policy_from_json(task.escalation_policy or ctx.settings.default_policy.as_json())
    number = task.escalation_level + 1
    level = policy.level(number)
    values: dict[str, Any] = {"escalation_level": number}
    if level is None or level.action is LevelAction.EXPIRE:
        step = transition(Action.EXPIRE)
        values |= LEASE_CLEARED
    elif level.action is LevelAction.REJECT:
        # A decision like a reviewer's, by the sweeper, with the notes the rule needs.
        step = transition(Action.TIME_OUT)
        values |= {
            **LEASE_CLEARED,
            "decision": Decision.REJECTED.value,
            "notes": TIMEOUT_NOTES,
            "operator_id": SYSTEM_PRINCIPAL.principal_id,
            "resolved_at": now,
        }
    else:
        following = policy.level(number + 1)
        assert following is not None  # every policy ends with expire
        values["deadline_at"] = (task.deadline_at or now) + timedelta(
            seconds=following.after_seconds
        )
        step = transition(Action.ESCALATE_LEVEL)
        if level.action is LevelAction.REASSIGN:
            step = transition(Action.REASSIGN)
            values |= {"assigned_group": level.assign_group, **LEASE_CLEARED}
    if step.target is not None:
        values["status"] = step.target.value
    updated = await store.apply_level(uow.connection, step, task, values=values, now=now)
    if updated is None:
        return None
    action = level.action.value if level else LevelAction.EXPIRE.value
    details = {"level": number, "level_action": action, "policy": policy.name}
    if level and level.assign_group:
        details["assigned_group"] = level.assign_group
    await record_transition(uow, step, updated, SYSTEM_PRINCIPAL, now, details)
    if action == LevelAction.REJECT.value:
        return updated  # decided: the decision's webhook event tells the source system
    kind = {"remind": "reminder", "reassign": "reassigned", "expire": "expired"}[action]
    await notify(uow, ctx, updated, kind=kind, targets=level.notify if level else (), now=now)
    return updated


async def cancel(ctx: ServiceContext, principal: Principal, raw_task_id: str) -> Task:
    """The producer withdraws a waiting task: ``CANCELLED``; links stop working; claims and
    resolves answer 409 ``ERR_TASK_CANCELLED``; no further reminders.

    Raises:
        Conflict: ``ERR_STATE_CONFLICT`` once it was decided, expired or cancelled.
    """
    step = transition(Action.CANCEL)
    require_role(principal, step.roles, "cancel tasks")
    task = await get_task(ctx, principal, raw_task_id)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        updated = await store.cancel_task(
            uow.connection, step, task.id, producer_id=principal.principal_id, now=now
        )
        if updated is None:
            current = await task_store.find_task(uow.connection, task.id)
            status = current.status.value if current else "gone"
            raise Conflict(
                f"task {task.id} is {status}; only waiting tasks can be cancelled",
                error_code=ErrorCode.STATE_CONFLICT,
            )
        await record_transition(uow, step, updated, principal, now)
        await uow.commit()
    return updated


async def sweep_due(
    ctx: ServiceContext, *, after_each: Callable[[Task], None] | None = None
) -> int:
    """One sweep: apply the due escalation level of each task in a batch, in one
    transaction with a savepoint per task, and purge a batch of expired idempotency keys.
    Returns how many levels were applied. ``after_each`` (a test seam) runs after each
    applied level, inside the transaction: raising there rolls the whole batch back."""
    now = ctx.now()
    applied = 0
    async with ctx.database.transaction() as uow:
        due = await store.lock_due_tasks(
            uow.connection, now=now, limit=ctx.settings.sweep_batch_size
        )
        for task in due:
            try:
                # One task that cannot be escalated (bad data) is logged and skipped
                # instead of blocking every other deadline.
                async with uow.connection.begin_nested():
                    updated = await apply_due_level(uow, ctx, task, now)
            except DBAPIError:
                log.exception("sweeper.task_failed", task_id=str(task.id))
                continue
            if updated is not None:
                applied += 1
                if after_each is not None:
                    after_each(updated)
        stalled = await execution.report_stalled_executions(
            uow, SYSTEM_PRINCIPAL, now=now, limit=ctx.settings.sweep_batch_size
        )
        purged = await purge_expired_idempotency_keys(
            uow.connection, now=now, limit=ctx.settings.sweep_batch_size
        )
        await uow.commit()
    if purged:
        log.info("sweeper.idempotency_keys_purged", keys=purged)
    if stalled:
        log.info("sweeper.executions_stalled", tasks=stalled)
    return applied
