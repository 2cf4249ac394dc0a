"""Durable waiting (seed 004): policies, escalation levels, cancellation, notifications
and resume links. Waiting is a stored state with a deadline; no worker ever blocks."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.exc import DBAPIError

from signoff.crypto import SecretUnavailable
from signoff.domain.clock import rfc3339
from signoff.domain.messages import render_notification
from signoff.domain.policies import POLICY_NAME, LevelAction, Policy, parse_policy, policy_from_json
from signoff.domain.revisions import structured_diff
from signoff.domain.states import Action, Decision, Role, TaskStatus, transition
from signoff.domain.tasks import Principal, Task, require_role, task_view
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    Forbidden,
    NotFound,
    Unprocessable,
    validation_error,
)
from signoff.services import approvals
from signoff.services.common import get_task, record_transition
from signoff.services.context import ServiceContext
from signoff.store import approvals as approval_store
from signoff.store import tasks as task_store
from signoff.store import waiting as store
from signoff.store.database import UnitOfWork
from signoff.store.idempotency import purge_expired_idempotency_keys
from signoff.store.tasks import LEASE_CLEARED

log = structlog.get_logger("signoff.waiting")

ADMIN = frozenset({Role.ADMIN})
SYSTEM_PRINCIPAL = Principal(
    key_id=uuid.UUID(int=0), principal_id="signoff-sweeper", role=Role.SYSTEM
)
_PROCESS_SECRET = secrets.token_bytes(32)


# Policies ------------------------------------------------------------------------------


async def policy_for(uow: UnitOfWork, ctx: ServiceContext, name: str | None) -> Policy:
    """The named policy, or the default from settings.

    Raises:
        Unprocessable: ``ERR_UNKNOWN_POLICY``.
    """
    if name is None:
        return ctx.settings.default_policy
    row = await store.find_policy(uow.connection, name)
    if row is None:
        if name == ctx.settings.default_policy.name:
            return ctx.settings.default_policy
        raise Unprocessable(
            f"no escalation policy named {name!r}",
            error_code=ErrorCode.UNKNOWN_POLICY,
            errors=[FieldError("policy", "no such policy")],
        )
    return policy_from_json({"name": row["name"], "levels": row["levels"]})


async def save_policy(
    ctx: ServiceContext, caller: Principal, body: Any, *, create: bool, name: str | None = None
) -> dict[str, Any]:
    """Create (``create``) or replace a policy (admins). Tasks keep the levels they were
    escalated with, so changing or deleting a policy never strands a waiting task."""
    require_role(caller, ADMIN, "manage escalation policies")
    if not isinstance(body, dict):
        raise validation_error([FieldError("(root)", "must be an object")])
    unknown = sorted(set(body) - {"name", "levels"})
    if unknown:
        raise validation_error([FieldError(key, "is not allowed") for key in unknown])
    policy = parse_policy(body.get("name", name), body.get("levels"))
    if name is not None and policy.name != name:
        raise validation_error([FieldError("name", "must match the path")])
    if policy.name == ctx.settings.default_policy.name:
        raise validation_error(
            [
                FieldError(
                    "name", "is the settings' default policy (SIGNOFF_DEFAULT_ESCALATION_POLICY)"
                )
            ]
        )
    document = policy.as_json()
    async with ctx.database.transaction() as uow:
        if not await store.upsert_policy(
            uow.connection,
            name=policy.name,
            levels=document["levels"],
            now=ctx.now(),
            create=create,
        ):
            if create:
                raise Conflict(f"policy {policy.name!r} exists", error_code=ErrorCode.POLICY_EXISTS)
            raise NotFound(f"no policy {policy.name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
        await uow.commit()
    return document


async def list_policies(ctx: ServiceContext, caller: Principal) -> list[dict[str, Any]]:
    require_role(caller, ADMIN, "manage escalation policies")
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.list_policies(uow.connection)
    return [ctx.settings.default_policy.as_json() | {"default": True}] + [
        {"name": r["name"], "levels": r["levels"]}
        for r in rows
        if r["name"] != ctx.settings.default_policy.name
    ]


async def get_policy(ctx: ServiceContext, caller: Principal, name: str) -> dict[str, Any]:
    """One policy (the default from settings under its own name).

    Raises:
        NotFound: ``ERR_POLICY_NOT_FOUND``.
    """
    require_role(caller, ADMIN, "manage escalation policies")
    if name == ctx.settings.default_policy.name:
        return ctx.settings.default_policy.as_json()
    if not POLICY_NAME.match(name):
        raise NotFound(f"no policy {name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
    async with ctx.database.transaction(write=False) as uow:
        row = await store.find_policy(uow.connection, name)
    if row is None:
        raise NotFound(f"no policy {name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
    return {"name": row["name"], "levels": row["levels"]}


async def delete_policy(ctx: ServiceContext, caller: Principal, name: str) -> None:
    require_role(caller, ADMIN, "manage escalation policies")
    async with ctx.database.transaction() as uow:
        if not POLICY_NAME.match(name) or not await store.delete_policy(uow.connection, name):
            raise NotFound(f"no policy {name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
        await uow.commit()


# Notifications and resume tokens -------------------------------------------------------


def hash_resume_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


#: Where a stored notification body's resume link goes. Producer text cannot contain it:
#: messages turn every control character (U+001E included) into a space.
LINK_PLACEHOLDER = "\x1eresume-link\x1e"


def notification_body(ctx: ServiceContext, row: dict[str, Any]) -> str:
    """The e-mail body to send: the stored body with its resume link rebuilt from the
    encrypted token (the link exists only in memory, while sending).

    Raises:
        SecretUnavailable: this process's keys cannot decrypt the token.
    """
    body = str(row["body"])
    if LINK_PLACEHOLDER not in body:
        return body
    if not row.get("resume_token"):
        raise SecretUnavailable("the notification's resume token is gone")
    token = ctx.keyring.decrypt(row["resume_token"])
    return body.replace(LINK_PLACEHOLDER, f"{ctx.settings.public_base_url.rstrip('/')}/r/{token}")


async def notify(
    uow: UnitOfWork,
    ctx: ServiceContext,
    task: Task,
    *,
    kind: str,
    targets: Sequence[str],
    now: datetime,
) -> int:
    """Queue an e-mail (in the notification outbox, same transaction) for every live
    reviewer or supervisor named by ``targets``, each with a fresh resume link bound to the
    task and to them, valid until the task would expire. The producer is never sent a link
    (nobody approves their own escalation). Without ``SIGNOFF_SMTP_HOST`` nothing is queued.
    Returns how many were queued."""
    if ctx.settings.smtp_host is None or not targets:
        return 0
    recipients = await store.reviewers_for(uow.connection, targets)
    view = task_view(task, now)
    policy = policy_from_json(task.escalation_policy) if task.escalation_policy else None
    # A link lives until the task would expire, and at least a day: an overdue task's
    # first link must not be dead on arrival (the task's state still decides every click).
    final = (
        policy.final_deadline(task.escalation_level, task.deadline_at)
        if policy and task.deadline_at
        else now
    )
    expires_at = max(final, now + timedelta(days=1))
    rows = []
    for recipient in recipients:
        if recipient["principal_id"] == task.producer_id or not recipient["email"]:
            continue
        link, stored_token = None, None
        if kind != "expired":
            token = secrets.token_urlsafe(24)  # 192 bits
            await store.insert_resume_token(
                uow.connection,
                token_hash=hash_resume_token(token),
                task_id=task.id,
                principal_id=recipient["principal_id"],
                expires_at=expires_at,
                now=now,
            )
            # No usable link at rest: the body gets a placeholder, and the token is
            # kept encrypted until the message is sent (see notification_body).
            link, stored_token = LINK_PLACEHOLDER, ctx.keyring.encrypt(token)
        subject, body = render_notification(view, kind=kind, link=link)
        rows.append(
            {
                "id": uuid.uuid4(),
                "task_id": task.id,
                "kind": kind,
                "principal_id": recipient["principal_id"],
                "email": recipient["email"],
                "subject": subject,
                "body": body,
                "resume_token": stored_token,
                "status": "PENDING",
                "attempts": 0,
                "next_attempt_at": now,
                "created_at": now,
            }
        )
    await store.insert_notifications(uow.connection, rows)
    return len(rows)


# Escalation levels (the sweeper's work) ------------------------------------------------


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
    if step.action in (Action.EXPIRE, Action.REASSIGN):
        await store.revoke_resume_tokens(uow.connection, task.id, now)
    details = {"level": number, "level_action": action, "policy": policy.name}
    if level and level.assign_group:
        details["assigned_group"] = level.assign_group
    await record_transition(uow, step, updated, SYSTEM_PRINCIPAL, now, details)
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
        await store.revoke_resume_tokens(uow.connection, task.id, now)
        await record_transition(uow, step, updated, principal, now)
        await uow.commit()
    return updated


# Resume links --------------------------------------------------------------------------


def csrf_token(ctx: ServiceContext, token_hash: str) -> str:
    """Form protection for resume pages: HMAC of the link, keyed with ``SIGNOFF_SECRET_KEY``."""
    key = ctx.settings.secret_key.encode() if ctx.settings.secret_key else _PROCESS_SECRET
    return hmac.new(key, token_hash.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class LinkState:
    """What a resume link leads to. ``http_status``: 200 open or decided, 410 gone."""

    http_status: int
    state: str  # "open", "decided", "gone"
    message: str
    task: dict[str, Any] | None = None
    approver: str | None = None
    csrf: str | None = None
    revision: dict[str, Any] | None = None
    """The current revision of the subject (``subject``, ``source_revisions``, ``digest``)."""
    diff: dict[str, Any] | None = None
    """Changes since the revision the approver last viewed, when it is not the current."""


async def _load_link(
    uow: UnitOfWork, ctx: ServiceContext, token: str, now: datetime
) -> tuple[dict[str, Any], Task]:
    token_hash = hash_resume_token(token)
    row = await store.find_resume_token(uow.connection, token_hash)
    task = await task_store.find_task(uow.connection, row["task_id"]) if row else None
    if row is None or task is None:
        raise NotFound("this link is not known", error_code=ErrorCode.LINK_NOT_FOUND)
    # Read the link again, after the task: a reassignment revokes links in the same commit
    # that moves the task, so either this read sees the revocation, or the task read above
    # predates the move and the conditional resolve (same level and group) matches nothing.
    # Reading the link only before the task let a move commit in between (READ COMMITTED).
    row = await store.find_resume_token(uow.connection, token_hash)
    if row is None:
        raise NotFound("this link is not known", error_code=ErrorCode.LINK_NOT_FOUND)
    return row, task


def _state(ctx: ServiceContext, row: dict[str, Any], task: Task, now: datetime) -> LinkState:
    """A dead link says why and shows nothing of the task; a decided one shows only the
    decision."""
    if row["revoked_at"] is not None:
        return LinkState(410, "gone", "This link was withdrawn (the task moved to another group).")
    if task.status is TaskStatus.RESOLVED:
        decided = {"id": str(task.id), "decision": task.decision, "operator_id": task.operator_id}
        return LinkState(
            200,
            "decided",
            f"The decision is already recorded: {task.decision}.",
            decided,
            row["principal_id"],
        )
    if task.status is TaskStatus.CANCELLED:
        return LinkState(410, "gone", "The producer withdrew this request; nothing to decide.")
    if task.status is TaskStatus.EXPIRED:
        return LinkState(
            410, "gone", "This request expired before a decision; nothing was recorded."
        )
    if row["expires_at"] <= now:
        return LinkState(410, "gone", "This link has expired.")
    view = task_view(task, now)
    return LinkState(
        200,
        "open",
        "Waiting for your decision.",
        view,
        row["principal_id"],
        csrf_token(ctx, row["token_hash"]),
    )


async def view_link(ctx: ServiceContext, token: str) -> LinkState:
    """What ``GET /r/{token}`` shows. Never changes state: mail scanners follow GETs."""
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        row, task = await _load_link(uow, ctx, token, now)
        state = _state(ctx, row, task, now)
        if state.state == "open" and task.has_subject:
            state = await _with_subject(uow, state, task, row["principal_id"])
    return state


async def _with_subject(uow: UnitOfWork, state: LinkState, task: Task, approver: str) -> LinkState:
    """Add what is being decided: the current revision, and its changes since the one the
    approver last viewed (read only: a GET records nothing)."""
    conn = uow.connection
    current = await approval_store.find_revision(conn, task.id, int(task.current_revision or 0))
    seen = await approval_store.last_viewed_revision(conn, task_id=task.id, principal_id=approver)
    diff = None
    if current is not None and seen is not None and seen != task.current_revision:
        before = await approval_store.find_revision(conn, task.id, seen)
        if before is not None:
            diff = {"from": seen, "to": task.current_revision} | structured_diff(
                before["subject"],
                current["subject"],
                before["source_revisions"],
                current["source_revisions"],
            )
    return replace(state, revision=current, diff=diff)


async def decide_by_link(
    ctx: ServiceContext,
    token: str,
    decision: Decision,
    *,
    csrf: str | None,
    caller: Principal | None,
    revision: int | None = None,
    notes: str | None = None,
) -> LinkState:
    """Claim and resolve in one step as the link's approver (seed 004's ``on_approval_callback``).

    A repeated or late click is a no-op that shows the recorded outcome; after expiry or
    cancellation 410. ``csrf`` is required from browsers (forms) and ``None`` for JSON
    callers; a JSON caller that authenticates must be the link's approver.

    Raises:
        NotFound: unknown link. Forbidden: wrong CSRF token, another principal, or
        self-approval. Conflict: someone else holds a live lease, or the subject changed.
    """
    step = transition(Action.RESOLVE_BY_LINK)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        row, task = await _load_link(uow, ctx, token, now)
        if csrf is not None and not hmac.compare_digest(csrf, csrf_token(ctx, row["token_hash"])):
            raise Forbidden(
                "the form is not valid for this link; reload the page", error_code=ErrorCode.CSRF
            )
        approver = row["principal_id"]
        if caller is not None and caller.principal_id != approver:
            raise Forbidden("this link belongs to another approver", error_code=ErrorCode.FORBIDDEN)
        state = _state(ctx, row, task, now)
        if state.state != "open":
            return state
        if decision is Decision.REVISION_REQUESTED and not task.has_subject:
            raise validation_error([FieldError("decision", "REVISION_REQUESTED needs a subject")])
        if decision is Decision.REVISION_REQUESTED and not notes:
            raise validation_error([FieldError("notes", "say what should change")])
        if task.has_subject and revision != task.current_revision:
            raise Conflict(
                f"name the revision you reviewed; the current one is {task.current_revision}: "
                "reload the page",
                error_code=ErrorCode.STALE_REVISION,
                extra={"current_revision": task.current_revision},
            )
        key_id = await store.key_for_principal(uow.connection, approver)
        if key_id is None:
            raise Forbidden(
                f"{approver} no longer holds a reviewer key", error_code=ErrorCode.FORBIDDEN
            )
        resolved = await store.resolve_by_link(
            uow.connection,
            step,
            task,
            approver=approver,
            approver_key_id=key_id,
            decision=decision,
            revision=task.current_revision,
            now=now,
            notes=notes,
        )
        if resolved is None:
            current = await task_store.find_task(uow.connection, task.id)
            assert current is not None
            if current.status in (TaskStatus.RESOLVED, TaskStatus.EXPIRED, TaskStatus.CANCELLED):
                return _state(ctx, row, current, now)
            if (current.escalation_level, current.assigned_group) != (
                task.escalation_level,
                task.assigned_group,
            ):
                return LinkState(
                    410, "gone", "This link was withdrawn (the task moved to another group)."
                )
            if current.current_revision != task.current_revision:
                raise Conflict(
                    "the subject changed; reload the page", error_code=ErrorCode.STALE_REVISION
                )
            if decision is Decision.APPROVED and current.producer_id == approver:
                raise Forbidden(
                    "nobody approves their own escalation", error_code=ErrorCode.SELF_APPROVAL
                )
            raise Conflict(
                f"{current.claimed_by} is reviewing this task right now",
                error_code=ErrorCode.STATE_CONFLICT,
            )
        actor = Principal(key_id=key_id, principal_id=approver, role=Role.REVIEWER)
        details: dict[str, Any] = {"decision": decision.value, "via": "resume_link"}
        if resolved.has_subject:
            details |= {"revision": resolved.current_revision, "digest": resolved.digest}
            await approval_store.record_view(
                uow.connection,
                task_id=resolved.id,
                principal_id=approver,
                revision=int(resolved.current_revision or 0),
                now=now,
            )
        await record_transition(uow, step, resolved, actor, now, details)
        await uow.commit()
    return LinkState(
        200,
        "decided",
        f"Recorded: {decision.value}. Thank you.",
        task_view(resolved, now),
        approver,
    )


async def task_notifications(
    ctx: ServiceContext, principal: Principal, raw_task_id: str
) -> list[dict[str, Any]]:
    """Queued and sent notifications of a task (admins and supervisors)."""
    require_role(principal, frozenset({Role.ADMIN, Role.SUPERVISOR}), "read notifications")
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.notifications_for_task(uow.connection, task.id)
    return [_notification_view(r) for r in rows]


def _notification_view(row: dict[str, Any]) -> dict[str, Any]:
    """Times in RFC 3339 with ``Z`` like everywhere else; ``next_attempt_at`` only while
    another attempt is planned (the column keeps the last plan once SENT or DEAD)."""
    view: dict[str, Any] = {}
    for key, value in row.items():
        if key in ("body", "resume_token"):
            continue  # never a usable link in an answer
        if isinstance(value, datetime):
            view[key] = rfc3339(value)
        elif isinstance(value, uuid.UUID):
            view[key] = str(value)
        else:
            view[key] = value
    if view.get("status") != "PENDING" and "next_attempt_at" in view:
        view["next_attempt_at"] = None
    return view


# The notifier's and the sweeper's transactions ------------------------------------------


async def claim_notifications(
    ctx: ServiceContext, *, lease_seconds: int, limit: int
) -> list[dict[str, Any]]:
    """Lease up to ``limit`` due notifications (a read first: an idle notifier takes no
    write lock)."""
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        if not await store.has_due_notifications(uow.connection, now=now):
            return []
    async with ctx.database.transaction() as uow:
        due = await store.claim_due_notifications(
            uow.connection,
            now=now,
            leased_until=now + timedelta(seconds=lease_seconds),
            limit=limit,
        )
        await uow.commit()
    return due


async def finish_notification(
    ctx: ServiceContext, row: dict[str, Any], *, error: str | None, next_attempt_at: datetime | None
) -> None:
    """Record one attempt: sent, to be retried at ``next_attempt_at``, or dead."""
    async with ctx.database.transaction() as uow:
        await store.finish_notification(
            uow.connection,
            row["id"],
            attempt=int(row["attempts"]),
            sent=error is None,
            error=error,
            next_attempt_at=next_attempt_at,
            now=ctx.now(),
        )
        await uow.commit()


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
        stalled = await approvals.report_stalled_executions(
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
