"""Pieces every use case shares: the task id, reading a task, recording a transition."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import structlog

from signoff import tracing
from signoff.domain.json_output import compact_json
from signoff.domain.states import Transition
from signoff.domain.tasks import Principal, Task, can_read
from signoff.errors import Forbidden, task_not_found
from signoff.metrics import TRANSITIONS, child
from signoff.services.context import ServiceContext
from signoff.store import tasks as task_store
from signoff.store import trail
from signoff.store.runtime.database import UnitOfWork

log = structlog.get_logger("signoff.tasks")


#: Compact JSON, as stored for idempotent replays and sent in responses.
dumps = compact_json


def parse_task_id(raw: str) -> uuid.UUID:
    """Task ids are UUIDs; a malformed one names no task (404 ``ERR_TASK_NOT_FOUND``)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise task_not_found(raw) from None


async def record_transition(
    uow: UnitOfWork,
    step: Transition,
    task: Task,
    principal: Principal,
    now: datetime,
    details: dict[str, Any] | None = None,
) -> None:
    """Write what the transition table says the change writes (the audit event, the
    outbox event when published, the end of the task's resume links when it ends them:
    :func:`signoff.store.trail.append_transition`); then its metric and log line."""
    await trail.append_transition(uow, step, task, principal, now, details)
    note_transition(step, task, principal)


def note_transition(step: Transition, task: Task, principal: Principal) -> None:
    """The metric and the log line of a committed (or committing) transition."""
    child(TRANSITIONS, step.event_type).inc()
    tracing.transition(step.event_type, step.action.value, task, principal.principal_id)
    log.info(
        step.event_type, task_id=str(task.id), actor=principal.principal_id, version=task.version
    )


async def get_task(ctx: ServiceContext, principal: Principal, raw_task_id: str) -> Task:
    """One task the caller may read (others are reported as not found, not forbidden, so
    ids do not leak across producers)."""
    task_id = parse_task_id(raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        task = await task_store.find_task(uow.connection, task_id)
    if task is None or not can_read(principal, task):
        raise task_not_found(raw_task_id)
    return task


async def producer_task(ctx: ServiceContext, principal: Principal, raw_task_id: str) -> Task:
    """The task, if the caller is the producer that escalated it.

    Raises:
        NotFound: as :func:`get_task`.
        Forbidden: the caller may read it but did not escalate it.
    """
    task = await get_task(ctx, principal, raw_task_id)
    if task.producer_id != principal.principal_id:
        raise Forbidden("only the producer that escalated the task may do this")
    return task
