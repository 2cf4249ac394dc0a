"""A Slack message is posted once per delivery, even across a crash.

Slack's ``chat.postMessage`` has no idempotency key, and delivery is at least once: a
process that dies after Slack accepted a post and before the answer (the message's
``ts``) was recorded would post it again on the retry. So every post carries message
metadata naming the deliveries it is for (``event_type`` :data:`CARD_EVENT` or
:data:`NOTICE_EVENT`; ``event_payload`` the task, the deliveries, and for a card the
revision it shows and a fingerprint of what it shows), and is sent only once the attempt
is committed (:func:`signoff.services.chat_cards.attempting`). A delivery retried with an
attempt outstanding first reads the channel's history around the attempt
(``conversations.history`` with ``include_all_metadata``) and adopts the message that
names it; it posts only when there is none. A post Slack refused (an answer with an
error, a 429) leaves no attempt outstanding. The history is read only then: never on a
first attempt, nor after a refusal.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError

from signoff.services import chat, chat_cards, chat_notices
from signoff.services.context import ServiceContext

log = structlog.get_logger("signoff.slack")

#: The metadata event types of the messages the door posts.
CARD_EVENT, NOTICE_EVENT = "signoff_card", "signoff_notice"
#: Messages read from a channel's history around an attempt (newest first, one page).
HISTORY_LIMIT = 100
#: What Slack answers a history read the app may not make (the app was installed before
#: it asked for the ``*:history`` scopes): the post goes ahead, at least once as before.
CANNOT_LOOK = frozenset({"missing_scope", "not_allowed_token_type", "no_permission"})

Call = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Earlier:
    """A message an earlier attempt posted: its ``ts``, the revision it showed and the
    fingerprint of what it showed (a card; ``None`` for a notice)."""

    ts: str
    revision: int | None
    fingerprint: str | None


def fingerprint(message: dict[str, Any]) -> str:
    """What a drawn message shows, in a few characters (text and blocks)."""
    shown = json.dumps(
        {"text": message.get("text"), "blocks": message.get("blocks")}, sort_keys=True
    )
    return hashlib.sha256(shown.encode()).hexdigest()[:32]


class Post:
    """One post for a group of deliveries (a card, a voter's direct message, or one
    person's notices) to one channel. ``sending`` says whether ``chat.postMessage`` was
    called: a refusal Slack answered to it means nothing was posted."""

    def __init__(
        self, call: Call, ctx: ServiceContext, door: str, group: list[chat_cards.Delivery]
    ) -> None:
        self.call, self.ctx, self.door, self.group = call, ctx, door, group
        self.sending = False

    async def deliver(self, where: str) -> None:
        """The card or the notices posted to ``where`` (a channel, or the person's direct
        message channel), or adopted from an earlier attempt's message there."""
        ctx, door, group = self.ctx, self.door, self.group
        earlier = await self.earlier(where)
        if chat_notices.is_notice(group[0].kind):
            for ts in {found.ts for found in earlier.values()}:
                said = [d for d in group if d.id in earlier and earlier[d.id].ts == ts]
                await chat_cards.sent(ctx, said, ts=ts)
            self.group = [d for d in group if d.id not in earlier]
            if self.group:
                text = await chat_notices.notice_text(ctx, self.group)
                _, ts = await self.send(where, {"text": text})
                await chat_cards.sent(ctx, self.group, ts=ts)
            return
        drawn = await chat.draw(ctx, group[0].task_id, door=door)
        found = earlier.get(group[0].id)
        if found is not None:  # posted before: recorded, and drawn again if it changed
            changed = found.fingerprint != fingerprint(drawn.message)
            await chat_cards.adopted(
                ctx,
                door,
                group,
                channel=where,
                ts=found.ts,
                revision=found.revision,
                redraw=changed,
            )
            return
        channel, ts = await self.send(where, drawn.message, revision=drawn.revision)
        await chat_cards.delivered(
            ctx, door, group, channel=channel, ts=ts, revision=drawn.revision
        )

    async def earlier(self, channel: str) -> dict[uuid.UUID, Earlier]:
        """The messages earlier attempts posted in ``channel`` for this group, by delivery
        (none when no attempt is outstanding: no history is read)."""
        span = chat_cards.look_back(self.group)
        if span is None:
            return {}
        oldest, latest = span
        try:
            answer = await self.call(
                "conversations.history",
                channel=channel,
                oldest=f"{oldest.timestamp():.6f}",
                latest=f"{latest.timestamp():.6f}",
                inclusive=True,
                limit=HISTORY_LIMIT,
                include_all_metadata=True,
            )
        except SlackApiError as error:
            data = error.response.data
            reason = data.get("error") if isinstance(data, dict) else None
            if reason not in CANNOT_LOOK:
                raise
            log.warning("slack.history_unavailable", channel=channel, error=reason)
            return {}
        wanted = {str(delivery.id): delivery.id for delivery in self.group}
        found: dict[uuid.UUID, Earlier] = {}
        for message in answer.get("messages") or []:
            meta = message.get("metadata") or {}
            if meta.get("event_type") not in (CARD_EVENT, NOTICE_EVENT):
                continue
            payload = meta.get("event_payload") or {}
            named = [n for n in str(payload.get("deliveries") or "").split(",") if n in wanted]
            if not named:
                continue
            revision = str(payload.get("revision") or "")
            earlier = Earlier(
                str(message.get("ts")),
                int(revision) if revision.isdigit() else None,
                str(payload["card"]) if payload.get("card") else None,
            )
            for name in named:
                found.setdefault(wanted[name], earlier)
        if found:
            log.info("slack.post_found", channel=channel, deliveries=len(found))
        return found

    async def send(
        self, channel: str, message: dict[str, Any], *, revision: int | None = None
    ) -> tuple[str, str]:
        """Post ``message`` for the group to ``channel``, the attempt committed first;
        returns the channel and ``ts`` Slack answered."""
        first = self.group[0]
        payload = {
            "task_id": str(first.task_id),
            "deliveries": ",".join(str(delivery.id) for delivery in self.group),
        }
        event = NOTICE_EVENT
        if not chat_notices.is_notice(first.kind):
            event = CARD_EVENT
            payload["card"] = fingerprint(message)
            payload["revision"] = "" if revision is None else str(revision)
        await chat_cards.attempting(self.ctx, self.group)
        self.sending = True
        response = await self.call(
            "chat.postMessage",
            channel=channel,
            metadata={"event_type": event, "event_payload": payload},
            **message,
        )
        return str(response["channel"]), str(response["ts"])
