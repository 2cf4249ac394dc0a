"""Digests: a person who chose one gets, when their interval ends, one e-mail gathering
every notification held for them, each task once with its headline and its link.

Gathering is one transaction over the notification outbox: the held rows become
``DIGESTED`` and the ``digest`` row is queued together, so a crash before the commit
leaves everything held (gathered again next time) and one after it leaves one digest to
send (sent by the notifier like any notification, under its lease). Nothing is lost and
nothing is gathered twice.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import structlog

from signoff.crypto import SecretUnavailable
from signoff.domain.digest_mail import DigestEntry, render_digest
from signoff.domain.states import ACTIVE_STATUSES
from signoff.domain.tasks import Task, task_view
from signoff.services.context import ServiceContext
from signoff.services.notifications import (
    LINK_PLACEHOLDER,
    digest_link_placeholder,
    hash_resume_token,
    seal_digest_tokens,
)
from signoff.store import digest_outbox as store
from signoff.store import waiting as waiting_store
from signoff.store.runtime.database import UnitOfWork

log = structlog.get_logger("signoff.digests")

#: People gathered per pass of the notifier.
BATCH = 20


async def gather_due_digests(ctx: ServiceContext) -> int:
    """Gather the digest of every person whose interval has ended; returns how many
    digests were queued."""
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        people = await store.people_with_due_digests(uow.connection, now=now, limit=BATCH)
    queued = 0
    for principal_id in people:
        try:
            async with ctx.database.transaction() as uow:
                if await gather_digest(uow, ctx, principal_id, now=now):
                    await uow.commit()
                    queued += 1
        except SecretUnavailable:  # left held: a replica holding the key gathers it
            log.error("digest.secret_undecryptable", principal_id=principal_id)
    return queued


def _urgency(task: Task, withdrawn: bool) -> tuple[bool, datetime, str]:
    """Tasks waiting for the person first, the soonest deadline first (no deadline last),
    then by title."""
    yours = task.status in ACTIVE_STATUSES and not withdrawn
    due = task.deadline_at if yours and task.deadline_at else datetime.max.replace(tzinfo=UTC)
    return (not yours, due, str((task.headline or {}).get("title") or task.entity_id))


async def gather_digest(
    uow: UnitOfWork, ctx: ServiceContext, principal_id: str, *, now: datetime
) -> uuid.UUID | None:
    """Within ``uow`` (not committed here): turn the person's held notifications into one
    queued ``digest`` row. ``None`` when nothing of theirs is due, or another notifier
    gathered it first.

    Raises:
        SecretUnavailable: this process's keys cannot decrypt a held resume token.
    """
    held = await store.lock_held(uow.connection, principal_id)
    if not held or min(row["next_attempt_at"] for row in held) > now:
        return None
    latest: dict[uuid.UUID, dict[str, Any]] = {}
    for row in held:  # oldest first: a task's latest event wins, in first-seen order
        latest[row["task_id"]] = row
    tasks = await store.tasks_by_id(uow.connection, list(latest))
    clear = {
        task_id: ctx.keyring.decrypt(row["resume_token"])
        for task_id, row in latest.items()
        if row["resume_token"] and LINK_PLACEHOLDER in row["body"]
    }
    withdrawn = await store.withdrawn_links(
        uow.connection, [hash_resume_token(token) for token in clear.values()], now=now
    )
    dead = {task_id for task_id, token in clear.items() if hash_resume_token(token) in withdrawn}
    entries: list[DigestEntry] = []
    tokens: list[str] = []
    order = sorted(latest.items(), key=lambda item: _urgency(tasks[item[0]], item[0] in dead))
    for task_id, row in order:
        task = tasks[task_id]
        token = clear.get(task_id)
        waiting = task.status in ACTIVE_STATUSES
        link = None
        if waiting and token is not None and task_id not in dead:
            link = digest_link_placeholder(len(tokens))
            tokens.append(token)
        entry = DigestEntry(
            task=task_view(task, now),
            kind=row["kind"],
            link=link,
            waiting=waiting,
            withdrawn=task_id in dead,
        )
        entries.append(entry)
    since = min(row["created_at"] for row in held)
    subject, body = render_digest(entries, since=since, now=now)
    digest_id = uuid.uuid4()
    if await store.mark_digested(uow.connection, [row["id"] for row in held], digest_id) != len(
        held
    ):
        return None  # another notifier gathered some of them: it queues the digest
    first = held[0]
    await waiting_store.insert_notifications(
        uow.connection,
        [
            {
                "id": digest_id,
                "task_id": first["task_id"],
                "kind": "digest",
                "principal_id": principal_id,
                "email": held[-1]["email"],
                "subject": subject,
                "body": body,
                "resume_token": seal_digest_tokens(ctx, tokens),
                "status": "PENDING",
                "attempts": 0,
                "next_attempt_at": now,
                "created_at": now,
            }
        ],
    )
    log.info("digest.gathered", principal_id=principal_id, tasks=len(entries), held=len(held))
    return digest_id
