"""Cards follow the task: whatever door changes a task (the console, the API, a link, a
vote, expiry, reassignment, a new revision), every card showing it is drawn again.

A chat door's worker reads the outbox after its cursor (:func:`fan_out`): a new task
becomes a card to post to its routed channel and, for a task decided by an approval
rule, a direct message to each person whose vote it awaits; any other event of a task
becomes a redraw of each card posted for it. The deliveries and the new cursor commit
together, so a restart neither loses nor repeats one. The worker then attempts what is
due (:func:`take_due`; the redraws of one message are drawn once), and reports
:func:`delivered`, :func:`failed` (retried with back-off, never sooner than the chat
system's ``Retry-After``) or :func:`skipped` (a card the chat system can never show).
Nothing on the escalate or decide path waits for any of it.

A post is made once, even across a crash: before a post is sent, :func:`attempting`
commits when; a retry of a delivery with an attempt outstanding first looks for the
message that attempt may have posted (:func:`look_back`, the span to look in) and, when
found, :func:`adopted` records it instead of posting again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from signoff.domain.states import ACTIVE_STATUSES
from signoff.domain.tasks import Task, awaits_vote
from signoff.services.context import ServiceContext
from signoff.store import catchup
from signoff.store import chat as card_store
from signoff.store import chat_deliveries as store
from signoff.store import tasks as task_store
from signoff.store import users as user_store

#: Events read per round.
BATCH = 100
#: How long one attempt holds a delivery before another process may try it.
ATTEMPT_LEASE = timedelta(seconds=60)
#: How far around an attempt a retry looks for the message it may have posted: the chat
#: system's clock and ours may differ by this much.
CLOCK_MARGIN = timedelta(minutes=2)
#: Back-off after a failed attempt: doubling from 1 s, at most this long.
MAX_BACKOFF_SECONDS = 300

#: Where a task's card goes: its channels (none: no card).
Route = Callable[[Task], list[str]]


@dataclass(frozen=True)
class Delivery:
    id: uuid.UUID
    task_id: uuid.UUID
    kind: str
    channel: str
    ts: str | None
    attempts: int
    created_at: datetime
    #: When a post for it was last sent with no answer recorded (``None``: none was).
    attempted_at: datetime | None = None


async def fan_out(ctx: ServiceContext, door: str, route: Route) -> int:
    """Turn the outbox events after the door's cursor into deliveries; returns how many
    events were read. A door's first round starts at the newest event (earlier tasks get
    no card)."""
    async with ctx.database.transaction() as uow:
        conn, now = uow.connection, ctx.now()
        exists, position = await store.read_cursor(conn, door)
        if not exists:
            newest = await catchup.last_position(conn)
            await store.save_cursor(conn, door, newest, exists=False, now=now)
            await uow.commit()
            return 0
        events = await catchup.events_after(conn, producer_id=None, after=position, limit=BATCH)
        if not events:
            return 0
        for event in events:
            await _deliveries_for(conn, door, route, event.payload, now)
        await store.save_cursor(conn, door, events[-1].position, exists=True, now=now)
        await uow.commit()
    return len(events)


async def _deliveries_for(
    conn: Any, door: str, route: Route, payload: dict[str, Any], now: datetime
) -> None:
    task_id = uuid.UUID(str(payload["data"]["id"]))
    if payload["type"] == "task.created":
        task = await task_store.find_task(conn, task_id)
        if task is None or task.status not in ACTIVE_STATUSES:
            return  # decided (or withdrawn) before its card was due: nothing to ask anyone
        for channel in route(task):
            await store.insert_delivery(
                conn, door=door, task_id=task_id, kind="post", channel=channel, ts=None, now=now
            )
        for voter in await _voters(conn, task):  # a rule's voters each get theirs
            await store.insert_delivery(
                conn, door=door, task_id=task_id, kind="dm", channel=voter, ts=None, now=now
            )
        return
    for card in await card_store.cards_of_task(conn, door, task_id):
        await store.insert_delivery(
            conn,
            door=door,
            task_id=task_id,
            kind="redraw",
            channel=card["channel"],
            ts=card["ts"],
            now=now,
        )


async def _voters(conn: Any, task: Task) -> list[str]:
    """The people (enabled accounts with an e-mail) whose vote a rule task awaits
    (:func:`signoff.domain.tasks.awaits_vote`, what every door asks)."""
    if task.approval_rule is None:
        return []
    return [
        user.principal_id
        for user in await user_store.list_users(conn)
        if user.email and user.disabled_at is None and awaits_vote(task, user.principal)
    ]


async def email_of(ctx: ServiceContext, principal_id: str) -> str | None:
    """The e-mail of an enabled account (where a direct message goes)."""
    async with ctx.database.transaction(write=False) as uow:
        user = await user_store.find_user(uow.connection, principal_id)
    return user.email if user is not None and user.disabled_at is None else None


async def skipped(ctx: ServiceContext, deliveries: list[Delivery], reason: str) -> None:
    """Deliveries that can never be made (the person has no account in the chat system,
    the channel or message is gone): kept as SKIPPED with the reason, not retried."""
    async with ctx.database.transaction() as uow:
        for delivery in deliveries:
            await store.skip_delivery(uow.connection, delivery.id, reason=reason, now=ctx.now())
        await uow.commit()


async def ask_redraw(
    ctx: ServiceContext, door: str, task_id: uuid.UUID, channel: str, ts: str
) -> None:
    """Draw one card again (a click refused: the card shows the task as it is now)."""
    async with ctx.database.transaction() as uow:
        await store.insert_delivery(
            uow.connection,
            door=door,
            task_id=task_id,
            kind="redraw",
            channel=channel,
            ts=ts,
            now=ctx.now(),
        )
        await uow.commit()


async def take_due(ctx: ServiceContext, door: str, limit: int = 20) -> list[Delivery]:
    """The deliveries due now that this process takes (each held for one attempt)."""
    taken = []
    async with ctx.database.transaction() as uow:
        now = ctx.now()
        for row in await store.due_deliveries(uow.connection, door, now, limit):
            if await store.take_delivery(
                uow.connection, row["id"], row["next_attempt_at"], now + ATTEMPT_LEASE
            ):
                taken.append(
                    Delivery(
                        row["id"],
                        row["task_id"],
                        row["kind"],
                        row["channel"],
                        row["ts"],
                        row["attempts"],
                        row["created_at"],
                        row["attempted_at"],
                    )
                )
        await uow.commit()
    return taken


async def attempting(ctx: ServiceContext, deliveries: list[Delivery]) -> None:
    """A post for ``deliveries`` is about to be sent: committed first, so that a retry
    after a crash (or a lost answer) looks for the message before posting again."""
    async with ctx.database.transaction() as uow:
        for delivery in deliveries:
            await store.mark_attempted(uow.connection, delivery.id, at=ctx.now())
        await uow.commit()


def look_back(deliveries: list[Delivery]) -> tuple[datetime, datetime] | None:
    """The span in which a message posted by an earlier attempt for ``deliveries`` was
    posted, if one may have been (``None``: no attempt is outstanding, nothing to look
    for). An attempt's post ends within its lease."""
    attempts = [d.attempted_at for d in deliveries if d.attempted_at is not None]
    if not attempts:
        return None
    return min(attempts) - CLOCK_MARGIN, max(attempts) + ATTEMPT_LEASE + CLOCK_MARGIN


async def adopted(
    ctx: ServiceContext,
    door: str,
    deliveries: list[Delivery],
    *,
    channel: str,
    ts: str,
    revision: int | None,
    redraw: bool,
) -> None:
    """An earlier attempt did post the card, as ``channel``/``ts`` showing ``revision``:
    it is recorded as delivered and, when ``redraw``, drawn again as the task is now
    (events since the attempt found no card to redraw)."""
    await delivered(ctx, door, deliveries, channel=channel, ts=ts, revision=revision)
    if redraw:
        await ask_redraw(ctx, door, deliveries[0].task_id, channel, ts)


async def delivered(
    ctx: ServiceContext,
    door: str,
    deliveries: list[Delivery],
    *,
    channel: str,
    ts: str,
    revision: int | None,
) -> None:
    """The card is posted (or drawn again) as message ``channel``/``ts``, showing
    ``revision``, for ``deliveries`` (a post, or the redraws of one message taken
    together: a card drawn now shows every change before it)."""
    async with ctx.database.transaction() as uow:
        now = ctx.now()
        await card_store.record_card(
            uow.connection,
            door=door,
            task_id=deliveries[0].task_id,
            channel=channel,
            ts=ts,
            revision=revision,
            now=now,
        )
        for delivery in deliveries:
            await store.finish_delivery(uow.connection, delivery.id, ts=ts, now=now)
        await uow.commit()


async def sent(ctx: ServiceContext, deliveries: list[Delivery], *, ts: str) -> None:
    """Notices sent as message ``ts`` (no card to remember)."""
    async with ctx.database.transaction() as uow:
        for delivery in deliveries:
            await store.finish_delivery(uow.connection, delivery.id, ts=ts, now=ctx.now())
        await uow.commit()


async def failed(
    ctx: ServiceContext,
    deliveries: list[Delivery],
    error: str,
    retry_after: float | None,
    *,
    not_posted: bool = False,
) -> datetime:
    """Try again later: after ``retry_after`` seconds when the chat system said so, else
    after a back-off that doubles with each attempt. Returns when. ``not_posted``: the
    chat system answered the post with a refusal, so the retry has nothing to look for;
    otherwise an outstanding attempt stays outstanding."""
    attempts = max(d.attempts for d in deliveries)
    wait = retry_after if retry_after is not None else min(2**attempts, MAX_BACKOFF_SECONDS)
    at = ctx.now() + timedelta(seconds=wait)
    async with ctx.database.transaction() as uow:
        for delivery in deliveries:
            await store.retry_delivery(
                uow.connection, delivery.id, at=at, error=error, not_posted=not_posted
            )
        await uow.commit()
    return at
