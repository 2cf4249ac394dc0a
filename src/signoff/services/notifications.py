"""Notifications: e-mails queued in the same transaction as the change they announce,
each approver's with a personal resume link, and the notifier's claims on them."""

from __future__ import annotations

import hashlib
import json
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from signoff.crypto import SecretUnavailable
from signoff.domain.clock import rfc3339
from signoff.domain.messages import render_notification
from signoff.domain.notify_choice import NONE, notify_choice
from signoff.domain.policies import policy_from_json
from signoff.domain.states import Role
from signoff.domain.tasks import Principal, Task, require_role, task_view
from signoff.services import chat_notices
from signoff.services.common import get_task
from signoff.services.context import ServiceContext
from signoff.store import digest_outbox
from signoff.store import waiting as store
from signoff.store.runtime.database import UnitOfWork


def hash_resume_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


#: Where a stored notification body's resume link goes. Producer text cannot contain it:
#: messages turn every control character (U+001E included) into a space.
LINK_PLACEHOLDER = "\x1eresume-link\x1e"


def digest_link_placeholder(number: int) -> str:
    """Where a digest's ``number``-th link goes (its tokens are a JSON list, in order)."""
    return f"\x1eresume-link:{number}\x1e"


def seal_digest_tokens(ctx: ServiceContext, tokens: list[str]) -> str | None:
    """A digest's resume tokens, in link order, as one secret at rest (re-encrypted with
    the newest key like any other)."""
    return ctx.keyring.encrypt(json.dumps(tokens)) if tokens else None


def open_digest_tokens(ctx: ServiceContext, sealed: str | None) -> list[str]:
    """Raises:
    SecretUnavailable: this process's keys cannot decrypt them."""
    return [str(token) for token in json.loads(ctx.keyring.decrypt(sealed))] if sealed else []


def notification_body(ctx: ServiceContext, row: dict[str, Any]) -> str:
    """The e-mail body to send: the stored body with its resume links rebuilt from the
    encrypted tokens (a link exists only in memory, while sending).

    Raises:
        SecretUnavailable: this process's keys cannot decrypt a token.
    """
    body = str(row["body"])
    base = f"{ctx.settings.public_base_url.rstrip('/')}/r/"
    if row["kind"] == "digest":
        tokens = open_digest_tokens(ctx, row.get("resume_token"))
        for number, token in enumerate(tokens):
            body = body.replace(digest_link_placeholder(number), base + token)
        if "\x1eresume-link" in body:
            raise SecretUnavailable("a digest's resume token is gone")
        return body
    if LINK_PLACEHOLDER not in body:
        return body
    if not row.get("resume_token"):
        raise SecretUnavailable("the notification's resume token is gone")
    token = ctx.keyring.decrypt(row["resume_token"])
    return body.replace(LINK_PLACEHOLDER, base + token)


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
    With the Slack door on, deadline and level notices also go to Slack
    (:func:`signoff.services.chat_notices.queue_notices`), whether or not e-mail is on.
    A person who chose a digest has theirs held until their digest is due; one who chose
    none is not queued anything. Returns how many were queued."""
    # The same notice as a direct message in Slack (new work already comes as a card).
    to_chat = ctx.settings.slack_enabled and chat_notices.goes_to_chat(kind)
    if not targets or (ctx.settings.smtp_host is None and not to_chat):
        return 0
    recipients = await store.reviewers_for(uow.connection, targets)
    if to_chat:
        await chat_notices.queue_notices(
            uow.connection, chat_notices.SLACK_DOOR, task, kind=kind, recipients=recipients, now=now
        )
    if ctx.settings.smtp_host is None:
        return 0
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
        choice = notify_choice(recipient["notify"])
        if choice.value == NONE:
            continue
        status, send_at = "PENDING", now
        if choice.every is not None:
            held = await digest_outbox.held_until(uow.connection, recipient["principal_id"])
            status, send_at = digest_outbox.HELD, held or now + choice.every
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
        subject, body = render_notification(view, kind=kind, link=link, now=now)
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
                "status": status,
                "attempts": 0,
                "next_attempt_at": send_at,
                "created_at": now,
            }
        )
    await store.insert_notifications(uow.connection, rows)
    return len(rows)


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
