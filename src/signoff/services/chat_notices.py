"""Notices in chat: what a deadline or an escalation level tells people by e-mail (a
reminder, a reassignment, an expiry) also goes to each of them as a direct message, when
a chat door is on, following their notification choice as e-mail does.

:func:`queue_notices` is called where the e-mail is queued (:func:`signoff.services.
notifications.notify`), in the same transaction as the change: one delivery row per
person, due at once for "each event", at the end of their digest interval for a digest
(notices of one person due together become one message), none for "none". The chat door's
worker sends them (:func:`notice_text` says what the message reads) with the same retries
as cards; nothing on the path that changed the task waits for the chat system.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from signoff.domain.chat_cards import escape
from signoff.domain.messages import KIND_TITLES, headline_title
from signoff.domain.notify_choice import NONE, notify_choice
from signoff.domain.tasks import Task, task_view
from signoff.services.context import ServiceContext
from signoff.store import chat_deliveries as store
from signoff.store import digest_outbox
from signoff.store import tasks as task_store

#: The door notices go through (the Slack door's name, :data:`signoff.chat.slack.DOOR`).
SLACK_DOOR = "slack"
#: The notifications that go to chat too (new work already comes as a card), by the
#: delivery kind each is queued as.
NOTICE_KINDS = {"reminder": "n:reminder", "reassigned": "n:reassigned", "expired": "n:expired"}
_KIND_OF = {delivery: kind for kind, delivery in NOTICE_KINDS.items()}


def is_notice(kind: str) -> bool:
    """Whether a delivery (of kind ``kind``) is a notice."""
    return kind in _KIND_OF


def goes_to_chat(kind: str) -> bool:
    """Whether a notification of kind ``kind`` goes to chat too."""
    return kind in NOTICE_KINDS


async def queue_notices(
    conn: Any,
    door: str,
    task: Task,
    *,
    kind: str,
    recipients: Sequence[dict[str, Any]],
    now: datetime,
) -> int:
    """Queue ``kind``'s notice for each recipient (``reviewers_for``'s rows) who hears of
    work at all: not the producer, not one without an e-mail (the chat account is found
    by it), not one who chose none. Returns how many were queued."""
    delivery_kind = NOTICE_KINDS.get(kind)
    if delivery_kind is None:
        return 0
    queued = 0
    for recipient in recipients:
        person = recipient["principal_id"]
        if person == task.producer_id or not recipient["email"]:
            continue
        choice = notify_choice(recipient["notify"])
        if choice.value == NONE:
            continue
        due = now
        if choice.every is not None:  # with the e-mail digest, else one of its own
            due = (
                await store.notice_due(conn, door, person)
                or await digest_outbox.held_until(conn, person)
                or now + choice.every
            )
        await store.insert_delivery(
            conn,
            door=door,
            task_id=task.id,
            kind=delivery_kind,
            channel=person,
            ts=None,
            now=now,
            due=due,
        )
        queued += 1
    return queued


async def notice_text(ctx: ServiceContext, deliveries: Sequence[Any]) -> str:
    """The message of one person's due notices: one line each, with the task page."""
    base = ctx.settings.public_base_url.rstrip("/")
    lines = []
    async with ctx.database.transaction(write=False) as uow:
        for delivery in deliveries:
            task = await task_store.find_task(uow.connection, delivery.task_id)
            if task is None:
                continue
            view = task_view(task, ctx.now())
            title = KIND_TITLES.get(_KIND_OF[delivery.kind], "Review update")
            what = escape(f"{headline_title(view)} ({view['reason_code']})")
            lines.append(f"• {title}: {what} <{base}/console/tasks/{task.id}|Open the task page>")
    if len(lines) > 1:
        lines.insert(0, f"{len(lines)} updates on Signoff reviews:")
    return "\n".join(lines)[:3900]
