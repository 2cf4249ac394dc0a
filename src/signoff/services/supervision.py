"""Supervisors and admins stepping in: force release, reassign to a group, cancel.

A reviewer who left keeps no task hostage: a force release ends their lease at once (their
token stops working), is audited with who held it, and is published to webhooks like a
release. Every change here is one conditional update through the transition table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from signoff.domain.states import Action, TaskStatus, Transition, transition
from signoff.domain.tasks import Principal, Task, require_role
from signoff.errors import Conflict, ErrorCode, FieldError, Unprocessable, validation_error
from signoff.services import notifications
from signoff.services.common import get_task, record_transition
from signoff.services.context import ServiceContext
from signoff.store import supervision as store
from signoff.store import tasks as task_store
from signoff.store.runtime.database import UnitOfWork

__all__ = ["cancel", "force_release", "known_groups", "reassign"]

MAX_GROUP_LENGTH = 100


async def _not_now(uow: UnitOfWork, task: Task, what: str) -> Conflict:
    current = await task_store.find_task(uow.connection, task.id)
    status = current.status.value if current else "gone"
    return Conflict(
        f"task {task.id} is {status}; {what}",
        error_code=ErrorCode.STATE_CONFLICT,
        extra={"task_status": status},
    )


async def force_release(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, *, holder: str | None = None
) -> Task:
    """End the lease on a claimed task, whoever holds it (``holder``: only if that
    principal still does, so a supervisor never releases a claim they did not see).

    Raises:
        Forbidden: ``ERR_FORBIDDEN`` unless supervisor or admin.
        NotFound: ``ERR_TASK_NOT_FOUND``.
        Conflict: ``ERR_STATE_CONFLICT`` when the task is not claimed (or by someone else).
    """
    step = transition(Action.FORCE_RELEASE)
    require_role(principal, step.roles, "force-release leases")
    task = await get_task(ctx, principal, raw_task_id)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        updated = await store.force_release_task(
            uow.connection, step, task.id, holder=holder, now=now
        )
        if updated is None:
            raise await _not_now(uow, task, "only a claimed task's lease can be force-released")
        details: dict[str, Any] = {"forced": True, "previous_holder": holder or task.claimed_by}
        await record_transition(uow, step, updated, principal, now, details)
        await uow.commit()
    return updated


async def known_groups(ctx: ServiceContext, principal: Principal) -> list[str]:
    """The groups a task can be handed to, sorted: those some enabled user or unrevoked
    API key belongs to, or some escalation policy (a stored one or the default) notifies
    or reassigns to. A group nobody names would strand the task: nobody could see it."""
    require_role(principal, transition(Action.HAND_OVER).roles, "reassign tasks")
    async with ctx.database.transaction(write=False) as uow:
        member_lists, stored_levels = await store.named_groups(uow.connection)
    found: set[str] = set()
    for groups in member_lists:
        found.update(g for g in groups or () if isinstance(g, str))
    default_levels = ctx.settings.default_policy.as_json()["levels"]
    for levels in [*stored_levels, default_levels]:
        for level in levels if isinstance(levels, list) else ():
            found.update(_groups_of_level(level))
    return sorted(found)


def _groups_of_level(level: object) -> set[str]:
    if not isinstance(level, dict):
        return set()
    named = {level.get("assign_group")} | {
        target.removeprefix("group:")
        for target in level.get("notify") or ()
        if isinstance(target, str) and target.startswith("group:")
    }
    return {name for name in named if isinstance(name, str) and name}


async def reassign(ctx: ServiceContext, principal: Principal, raw_task_id: str, group: str) -> Task:
    """Hand an active task to ``group``: it goes back to that group's queue (a lease held
    ends) and the group's reviewers are notified like an escalation's reassignment.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` for an empty or overlong group name;
            ``ERR_UNKNOWN_GROUP`` (field ``group``) for a group no user, API key or
            escalation policy names (:func:`known_groups`): its tasks would reach nobody.
        Conflict: ``ERR_STATE_CONFLICT`` once decided, expired or cancelled.
    """
    step = transition(Action.HAND_OVER)
    require_role(principal, step.roles, "reassign tasks")
    name = group.strip()
    if not name or len(name) > MAX_GROUP_LENGTH or "\x00" in name:
        raise validation_error(
            [FieldError("group", f"must be 1 to {MAX_GROUP_LENGTH} characters, without U+0000")]
        )
    if name not in await known_groups(ctx, principal):
        raise Unprocessable(
            f"no user, API key or escalation policy names the group {name!r}: choose a known "
            "group, or add a member to it first",
            error_code=ErrorCode.UNKNOWN_GROUP,
            errors=[FieldError("group", "is not a known group")],
        )
    task = await get_task(ctx, principal, raw_task_id)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        updated = await store.hand_over_task(uow.connection, step, task.id, group=name, now=now)
        if updated is None:
            raise await _not_now(uow, task, "only a waiting or claimed task can be reassigned")
        details = {
            "assigned_group": name,
            "previous_group": task.assigned_group,
            "previous_holder": task.claimed_by if task.status is TaskStatus.CLAIMED else None,
        }
        await _finish(uow, ctx, step, updated, principal, now, details, notify=True)
    return updated


async def cancel(ctx: ServiceContext, principal: Principal, raw_task_id: str) -> Task:
    """Withdraw an active task on its producer's behalf (``CANCELLED``; links stop
    working; the producer hears of it through the ``task.cancelled`` event).

    Raises:
        Conflict: ``ERR_STATE_CONFLICT`` once decided, expired or cancelled.
    """
    step = transition(Action.WITHDRAW)
    require_role(principal, step.roles, "cancel tasks")
    task = await get_task(ctx, principal, raw_task_id)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        updated = await store.withdraw_task(uow.connection, step, task.id, now=now)
        if updated is None:
            raise await _not_now(uow, task, "only waiting tasks can be cancelled")
        await _finish(uow, ctx, step, updated, principal, now, {"by_supervisor": True})
    return updated


async def _finish(
    uow: UnitOfWork,
    ctx: ServiceContext,
    step: Transition,
    task: Task,
    principal: Principal,
    now: datetime,
    details: dict[str, Any],
    *,
    notify: bool = False,
) -> None:
    await record_transition(uow, step, task, principal, now, details)
    if notify and task.assigned_group:
        await notifications.notify(
            uow, ctx, task, kind="reassigned", targets=[f"group:{task.assigned_group}"], now=now
        )
    await uow.commit()
