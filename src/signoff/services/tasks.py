"""Use cases on review tasks: the decision, the listing and the audit trail. The
services are the only code that decides to commit.

Escalation lives in :mod:`signoff.services.escalate`, leases in
:mod:`signoff.services.leases`; their use cases are importable from here too.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from signoff.domain.change_requests import change_request, checked_fields
from signoff.domain.decisions import checked_notes, require_made_by_people, rule_for
from signoff.domain.doors import recorded_door
from signoff.domain.params import decode_token
from signoff.domain.states import (
    Action,
    Decision,
    ExecutionStatus,
    TaskStatus,
    transition,
)
from signoff.domain.tasks import (
    Principal,
    Task,
    awaits_vote,
    hash_lease_token,
    refusal_for,
    require_operator,
    require_role,
    same_resolution,
    visibility,
)
from signoff.errors import FieldError, validation_error
from signoff.services import grants
from signoff.services.common import (
    dumps,
    get_task,
    note_transition,
    parse_task_id,
)
from signoff.services.context import ServiceContext
from signoff.services.edits import prepared_edit
from signoff.services.escalate import EscalationOutcome, escalate
from signoff.services.leases import LeaseGrant, claim, claim_next, lease_for, release, renew
from signoff.store import tasks as task_store
from signoff.store import trail
from signoff.store.writes import Resolution

__all__ = [
    "MAX_PAGE_SIZE",
    "EscalationOutcome",
    "LeaseGrant",
    "TaskPage",
    "claim",
    "claim_next",
    "escalate",
    "list_tasks",
    "release",
    "renew",
    "resolve",
    "task_audit_trail",
]

MAX_PAGE_SIZE = 200
#: Open vote tasks read at a time for ``awaiting_my_vote``.
VOTE_BATCH = 200


@dataclass(frozen=True)
class TaskPage:
    tasks: Sequence[Task]
    next_cursor: str | None


async def resolve(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    lease_token: str,
    *,
    decision: Decision,
    notes: object,
    resolution_payload: Any,
    door: str,
    operator_id: str | None = None,
    revision: int | None = None,
    digest: str | None = None,
    fields: object = None,
    subject: object = None,
    remember_seconds: object = None,
) -> Task:
    """Record the decision under a live lease: after a lapse the holder renews first.

    Every door decides through here and names itself (``door``, one of
    :data:`signoff.domain.doors.DOORS`: recorded in the decision's audit event, and so
    in its receipt), under the decision rules
    (:mod:`signoff.domain.decisions`): the notes the decision needs and their one limit
    (and the fields a change request names, with their reasons; an edit of the subject
    against what its producer declared ``editable``) are checked before anything is
    written; the subject it needs and who may not make it
    are conditions of the write itself. On a task with a subject the decision names the
    ``revision`` and ``digest`` reviewed; an approval is bound to them and to the
    approver's key, and expires after the task's ``approval_ttl_seconds`` (or
    ``SIGNOFF_APPROVAL_TTL_SECONDS``). Repeating the identical successful resolve with the
    same token returns the recorded task and writes nothing.

    Raises:
        Conflict: ``ERR_LEASE_LOST`` (token not current), ``ERR_LEASE_EXPIRED`` (the
            caller's lease lapsed: renew first), ``ERR_STALE_REVISION``.
        Forbidden: ``ERR_OPERATOR_MISMATCH``, ``ERR_SELF_APPROVAL``.
        Unprocessable: notes the decision rules refuse; revision/digest missing on a task
            with a subject.
    """
    step = transition(Action.RESOLVE)
    require_role(principal, step.roles, "resolve tasks")
    require_operator(principal, operator_id)
    require_made_by_people(decision)
    notes = checked_notes(decision, notes)
    named = checked_fields(decision, fields)
    task_id = parse_task_id(raw_task_id)
    edit = None
    if rule_for(decision).edits_subject:
        edit = await prepared_edit(ctx, task_id, revision, subject)
    elif subject is not None:
        problem = f"is only for a decision that edits the subject, not to {rule_for(decision).verb}"
        raise validation_error([FieldError("subject", problem)])
    remember = await grants.checked_remember(ctx, decision, task_id, remember_seconds)
    token_hash, now = hash_lease_token(lease_token), ctx.now()
    feedback = change_request(
        decision, notes=notes, fields=named, revision=revision, by=principal.principal_id, at=now
    )
    outcome = await ctx.database.writes.resolve(
        lease_for(ctx, principal, now, token_hash),
        task_id,
        Resolution(
            decision=decision,
            notes=notes,
            resolution_payload=resolution_payload,
            revision=revision,
            digest=digest,
            approval_ttl_seconds=ctx.settings.approval_ttl_seconds,
            change_request=feedback,
            edit=edit,
            remember_seconds=remember,
            door=recorded_door(door),
        ),
    )
    if isinstance(outcome, Task):
        note_transition(step, outcome, principal)
        return outcome
    current = outcome.current
    if (
        current is not None
        and current.status is TaskStatus.RESOLVED
        and current.lease_token_hash == token_hash
        and current.operator_id == principal.principal_id
        and same_resolution(
            current,
            decision=decision.value,
            notes=notes,
            resolution_payload=resolution_payload,
            fields=named,
        )
    ):
        return current
    raise refusal_for(
        step,
        current,
        task_id=task_id,
        principal=principal,
        lease_token_hash=token_hash,
        now=now,
        decision=decision,
        revision=revision,
        digest=digest,
    )


async def task_audit_trail(
    ctx: ServiceContext, principal: Principal, raw_task_id: str
) -> Sequence[dict[str, Any]]:
    """The append-only audit trail of a task the caller may read, oldest first."""
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        return await trail.audit_events_for_task(uow.connection, task.id)


def _encode_cursor(task: Task) -> str:
    raw = dumps([task.created_at.isoformat(), str(task.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        parts = decode_token(cursor)
        if not isinstance(parts, list):
            raise ValueError(cursor)
        created_at, task_id = parts
        moment = datetime.fromisoformat(created_at)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment.astimezone(UTC), uuid.UUID(task_id)
    except (ValueError, TypeError, AttributeError, OverflowError):
        # Anything a tampered cursor can raise; JSON and Unicode errors are ValueErrors.
        raise validation_error(
            [FieldError("cursor", "is not a cursor this service issued")]
        ) from None


async def list_tasks(
    ctx: ServiceContext,
    principal: Principal,
    *,
    limit: int = 50,
    cursor: str | None = None,
    status: TaskStatus | None = None,
    entity_type: str | None = None,
    entity_id: str | None = None,
    reason_code: str | None = None,
    execution_status: ExecutionStatus | None = None,
    claimed_by: str | None = None,
    assigned_group: str | None = None,
    awaiting_my_vote: bool = False,
) -> TaskPage:
    """A page of the tasks the caller may read (:func:`signoff.domain.tasks.visibility`),
    in creation order. ``claimed_by`` names a live claim's holder (``me``: the caller);
    ``awaiting_my_vote``: only the tasks awaiting the caller's vote
    (:func:`signoff.domain.tasks.awaits_vote`, read a batch at a time)."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise validation_error([FieldError("limit", f"must be between 1 and {MAX_PAGE_SIZE}")])
    if claimed_by == "me":
        claimed_by = principal.principal_id
    after = _decode_cursor(cursor) if cursor else None
    now = ctx.now()
    wanted: list[Task] = []
    size = max(limit + 1, VOTE_BATCH) if awaiting_my_vote else limit + 1
    async with ctx.database.transaction(write=False) as uow:
        while len(wanted) <= limit:
            batch = await task_store.list_tasks(
                uow.connection,
                now=now,
                limit=size,
                after=after,
                status=status,
                entity_type=entity_type,
                entity_id=entity_id,
                reason_code=reason_code,
                execution_status=execution_status.value if execution_status else None,
                claimed_by=claimed_by,
                assigned_group=assigned_group,
                open_to_votes=awaiting_my_vote,
                scope=visibility(principal),
            )
            if not awaiting_my_vote:
                wanted = list(batch)
                break
            wanted += [task for task in batch if awaits_vote(task, principal)]
            if len(batch) < size:
                break
            after = (batch[-1].created_at, batch[-1].id)
    tasks = wanted
    page = list(tasks[:limit])
    next_cursor = _encode_cursor(page[-1]) if len(tasks) > limit else None
    return TaskPage(tasks=page, next_cursor=next_cursor)
