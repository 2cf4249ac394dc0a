"""The Slack door: cards with Approve / Reject / Request revision buttons (and, where the
producer declared fields editable, Edit and approve: :mod:`signoff.chat.slack_edits`), on
Slack's own framework (Bolt for Python, async) in both of Slack's transports — HTTP at
``POST /slack/events`` (every request verified with the signing secret, none older than
five minutes) and Socket Mode (an outbound WebSocket opened with the app token).

A click is acknowledged at once (Slack's three-second window) and then decided through
:func:`signoff.services.chat.decide`, as the Signoff person whose verified e-mail the
Slack user has (:func:`signoff.services.chat.person_for`); the button's signed value
names the task, revision and digest the card showed. A refusal is told to the clicker
privately (an ephemeral message), and the card is drawn again for the task as it is now.

Imported only when ``SIGNOFF_SLACK_BOT_TOKEN`` is set with a signing secret or an app
token (docs/slack.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from typing import Any

import structlog
from fastapi import FastAPI, Request
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from starlette.responses import JSONResponse, Response

from signoff.bodies import read_bounded_body
from signoff.chat import slack_edits, slack_once
from signoff.domain.chat_cards import ACTION_PREFIX, EDIT_MODAL, NOTES_MODAL, notes_modal
from signoff.domain.decisions import rule_for
from signoff.domain.states import Decision
from signoff.domain.tasks import Task
from signoff.errors import ErrorCode, PayloadTooLarge, SignoffError
from signoff.metrics import SLACK_CALLS, child
from signoff.services import chat, chat_cards, chat_notices
from signoff.services.context import ServiceContext

log = structlog.get_logger("signoff.slack")

DOOR = "slack"
#: What Slack answers for a card it can never show: the delivery is skipped, not retried.
NEVER = frozenset(
    {
        "channel_not_found",
        "is_archived",
        "message_not_found",
        "cant_update_message",
        "not_in_channel",
        "msg_too_long",
        "invalid_blocks",
    }
)
#: The largest request Slack sends us that is read (interactivity payloads are far smaller).
MAX_REQUEST_BYTES = 64 * 1024


class SlackDoor:
    """One process's Slack app: the Bolt app, its Web API client and the handlers.
    Implements :class:`signoff.services.chat.ChatChannel`."""

    door = DOOR

    def __init__(self, ctx: ServiceContext) -> None:
        settings = ctx.settings
        self.ctx = ctx
        # A 429 is not waited out inside a call: the card's delivery is tried again after
        # Retry-After, by the clock (services/chat_cards.py).
        self.client = AsyncWebClient(
            token=settings.slack_bot_token, base_url=_base(settings.slack_api_url)
        )
        # A post is never sent again inside a call (slack_sdk would, once, after a dropped
        # connection, when Slack may have posted it): the door's retry looks first.
        self.poster = AsyncWebClient(
            token=settings.slack_bot_token,
            base_url=_base(settings.slack_api_url),
            retry_handlers=[],
        )
        self.app = AsyncApp(
            client=self.client,
            signing_secret=settings.slack_signing_secret or "",
            # Socket Mode alone: Slack's WebSocket is authenticated by the app token.
            request_verification_enabled=bool(settings.slack_signing_secret),
            process_before_response=False,
            name="signoff",
        )
        self.app.action(re.compile("^" + re.escape(ACTION_PREFIX)))(self._on_button)
        self.app.view(NOTES_MODAL)(self._on_notes)
        self.app.view(EDIT_MODAL)(self._on_edit)
        self.handler = AsyncSlackRequestHandler(self.app)
        self._socket: Any = None
        self._wake = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None
        self._connecting: asyncio.Task[None] | None = None

    # Lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start in the background — checking the bot token, following the outbox, and
        (with an app token) Socket Mode — so that a Slack that is down or slow never keeps
        Signoff from starting."""
        self._follower = asyncio.create_task(self._follow(), name="slack-cards")
        if self.ctx.settings.slack_app_token:
            self._connecting = asyncio.create_task(self._open_socket(), name="slack-socket")

    async def _check_token(self) -> None:
        """A token Slack refuses (revoked, wrong) is an operator error: said once, counted."""
        try:
            identity = await self._call("auth.test")
            log.info("slack.connected", team=identity.get("team"), bot=identity.get("user_id"))
        except SlackApiError as error:
            reason = _reason(error)
            if reason in ("unreachable", "ratelimited"):
                log.warning("slack.unreachable", error=reason)
            else:
                log.error(
                    "slack.token_refused",
                    error=reason,
                    message=(
                        "Slack refused SIGNOFF_SLACK_BOT_TOKEN: cards cannot be posted or "
                        "updated until it is replaced (see docs/slack.md)"
                    ),
                )
        except Exception as error:  # unreachable: cards wait
            log.warning("slack.unreachable", error=repr(error)[:200])

    async def _open_socket(self) -> None:
        """Socket Mode's WebSocket. slack_sdk keeps trying until Slack lets it open (every
        ten seconds, its ping interval) and reconnects a connection that drops later."""
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        handler: Any = AsyncSocketModeHandler(
            self.app, self.ctx.settings.slack_app_token, web_client=self.client
        )
        self._socket = handler
        await handler.connect_async()
        log.info("slack.socket_mode_connected")

    async def stop(self) -> None:
        for task in (self._connecting, self._follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._connecting = self._follower = None
        if self._socket is not None:
            await self._socket.close_async()
            self._socket = None

    # Cards follow the task --------------------------------------------------------------

    def route(self, task: Task) -> list[str]:
        """The channel ``SIGNOFF_SLACK_CHANNELS`` names for the task's group, else its
        escalation policy, else its producer; else the default channel; none: no card."""
        settings, routes = self.ctx.settings, self.ctx.settings.slack_routes
        keys = [
            f"group:{task.assigned_group}" if task.assigned_group else None,
            f"policy:{(task.escalation_policy or {}).get('name')}",
            f"producer:{task.producer_id}",
        ]
        named = [routes[key] for key in keys if key in routes]
        channel = named[0] if named else settings.slack_default_channel
        return [channel] if channel else []

    def wake(self) -> None:
        self._wake.set()

    async def _follow(self) -> None:
        """Turn outbox events into card deliveries and attempt what is due, woken by a
        click in this process or every ``SIGNOFF_DISPATCHER_POLL_SECONDS``."""
        poll = self.ctx.settings.dispatcher_poll_seconds
        await self._check_token()
        while True:
            self._wake.clear()
            try:
                busy = True
                while busy:  # until the outbox is read and nothing is due
                    read = await chat_cards.fan_out(self.ctx, DOOR, self.route)
                    busy = bool(read) | bool(await self._deliver_due())
            except Exception:  # a database outage: the next round tries again
                log.exception("slack.follow_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=poll)

    async def _deliver_due(self) -> int:
        """Attempt what is due now; returns how many deliveries were taken. When Slack
        itself fails (down, or rate-limiting), the rest of the round waits as long as the
        failed one instead of meeting the same answer."""
        taken = await chat_cards.take_due(self.ctx, DOOR)
        groups: dict[tuple[str, str | None, str], list[chat_cards.Delivery]] = {}
        for delivery in taken:
            key = (delivery.channel, delivery.ts, delivery.kind)
            if chat_notices.is_notice(delivery.kind):  # one message for a person's notices
                key = (delivery.channel, None, "notice")
            elif delivery.kind != "redraw":
                key = (delivery.channel, str(delivery.id), delivery.kind)
            groups.setdefault(key, []).append(delivery)
        pending = list(groups.values())
        while pending:
            stopped = await self._deliver(pending.pop(0))
            if stopped is not None and pending:
                reason, retry_after = stopped
                rest = [delivery for group in pending for delivery in group]
                await chat_cards.failed(self.ctx, rest, reason, retry_after)
                break
        return len(taken)

    async def _deliver(self, group: list[chat_cards.Delivery]) -> tuple[str, float | None] | None:
        """Post or redraw one card (or send one person's notices); a failure of Slack
        itself is returned (why, and the ``Retry-After`` it gave); a card Slack can never
        show is skipped. A post is made once (:mod:`signoff.chat.slack_once`)."""
        first = group[0]
        post = slack_once.Post(self._call, self.ctx, DOOR, group)
        try:
            if first.kind == "redraw":
                channel, ts = first.channel, str(first.ts)
                drawn = await chat.draw(self.ctx, first.task_id, door=DOOR, channel=channel, ts=ts)
                await self._call("chat.update", channel=channel, ts=ts, **drawn.message)
                await chat_cards.delivered(
                    self.ctx, DOOR, group, channel=channel, ts=ts, revision=drawn.revision
                )
                return None
            where = first.channel
            if first.kind != "post":  # a voter's card or notices: their direct messages
                found = await self._direct_channel(first.channel)
                if found is None:
                    await chat_cards.skipped(self.ctx, group, "no Slack account")
                    return None
                where = found
            await post.deliver(where)
        except SlackApiError as error:
            reason, retry_after = _reason(error), None
            if reason in NEVER:
                await chat_cards.skipped(self.ctx, post.group, reason)
                log.warning("slack.card_skipped", task_id=str(first.task_id), error=reason)
                return None
            if error.response.status_code == 429:
                header = error.response.headers.get("Retry-After") or "1"
                retry_after = float(header[0] if isinstance(header, list) else header)
            # A post Slack answered with a refusal was not made; any other failure of a
            # post may have been (the answer was lost): the retry looks for it first.
            refused = post.sending and reason != "unreachable"
            at = await chat_cards.failed(
                self.ctx, post.group, reason, retry_after, not_posted=refused
            )
            log.warning(
                "slack.card_delayed", task_id=str(first.task_id), error=reason, retry_at=str(at)
            )
            return (reason, retry_after) if reason in ("ratelimited", "unreachable") else None
        except Exception as error:  # Slack unreachable, or an answer that is not JSON
            reason = repr(error)[:200]
            await chat_cards.failed(self.ctx, post.group, reason, None)
            log.warning("slack.card_delayed", task_id=str(first.task_id), error=reason)
            return reason, None
        return None

    # The Web API, counted --------------------------------------------------------------

    async def _call(self, method: str, **params: Any) -> Any:
        try:
            client = self.poster if method == "chat.postMessage" else self.client
            response = await client.api_call(method, json=params)
        except SlackApiError as error:
            child(SLACK_CALLS, method, _reason(error)[:40]).inc()
            raise
        except OSError:
            child(SLACK_CALLS, method, "unreachable").inc()
            raise
        child(SLACK_CALLS, method, "ok").inc()
        return response

    async def _direct_channel(self, principal_id: str) -> str | None:
        """The direct-message channel with the Slack user whose e-mail is the person's
        (``None``: they have no Slack account, or no e-mail here)."""
        email = await chat_cards.email_of(self.ctx, principal_id)
        if not email:
            return None
        try:
            found = await self._call("users.lookupByEmail", email=email)
        except SlackApiError as error:
            if _reason(error) == "users_not_found":
                return None
            raise
        opened = await self._call("conversations.open", users=str(found["user"]["id"]))
        return str(opened["channel"]["id"])

    # ChatChannel ------------------------------------------------------------------------

    async def post_card(self, task_id: uuid.UUID, channel: str) -> str:
        drawn = await chat.draw(self.ctx, task_id, door=DOOR)
        response = await self._call("chat.postMessage", channel=channel, **drawn.message)
        where, ts = str(response["channel"]), str(response["ts"])
        await chat.note_card(self.ctx, drawn, door=DOOR, channel=where, ts=ts)
        return ts

    async def redraw(self, task_id: uuid.UUID, channel: str, message: str) -> None:
        """Asks for the card to be drawn again (by the worker, with its retries)."""
        await chat_cards.ask_redraw(self.ctx, DOOR, task_id, channel, message)
        self.wake()

    async def tell(self, channel: str, user: str, text: str) -> None:
        await self._call("chat.postEphemeral", channel=channel, user=user, text=text)

    async def send_notice(self, principal_id: str, text: str) -> str | None:
        where = await self._direct_channel(principal_id)
        if where is None:
            return None
        response = await self._call("chat.postMessage", channel=where, text=text)
        return str(response["ts"])

    async def email_of(self, user: str) -> str | None:
        """The user's e-mail, only when Slack says it is confirmed (and the user is a
        live member of the workspace)."""
        response = await self._call("users.info", user=user)
        member = response.get("user") or {}
        if member.get("deleted") or not member.get("is_email_confirmed"):
            return None
        email = (member.get("profile") or {}).get("email")
        return str(email) if email else None

    # Handlers ---------------------------------------------------------------------------

    async def _on_button(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        try:
            user = str(body["user"]["id"])
            channel, ts = _message_of(body)
            decision = Decision(str(action["action_id"])[len(ACTION_PREFIX) :])
            bound = chat.read_button(self.ctx, action.get("value"))
        except (ValueError, KeyError, TypeError, SignoffError) as error:
            text = error.message if isinstance(error, SignoffError) else "not a Signoff button"
            log.warning("slack.button_refused", reason=text)
            user, (channel, _) = str((body.get("user") or {}).get("id") or ""), _message_of(body)
            if user and channel:
                await self._tell_quietly(channel, user, f"Nothing was decided: {text}.")
            return
        if rule_for(decision).edits_subject:  # the edit modal, for the card's revision
            value, trigger = str(action["value"]), str(body.get("trigger_id") or "")
            await slack_edits.open_edit(self, user, (channel, ts), bound, value, trigger)
            return
        if rule_for(decision).notes_required:
            value = str(action["value"])
            modal = notes_modal(decision, value, f"{channel} {ts}")
            await self._call("views.open", trigger_id=body["trigger_id"], view=modal)
            return
        await self._decide(user, channel, ts, bound, decision, notes=None)

    async def _on_notes(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        try:
            user = str(body["user"]["id"])
            meta = json.loads(view.get("private_metadata") or "{}")
            decision = Decision(str(meta["decision"]))
            bound = chat.read_button(self.ctx, meta.get("value"))
            channel, _, ts = str(meta["where"]).partition(" ")
            notes = view["state"]["values"]["notes"]["notes"].get("value")
        except (ValueError, KeyError, TypeError, SignoffError):
            await ack(response_action="errors", errors={"notes": "This form was not drawn here."})
            return
        try:
            person = await chat.person_for(self.ctx, await self.email_of(user))
            done = await chat.decide(
                self.ctx,
                door=DOOR,
                chat_user=user,
                person=person,
                bound=bound,
                decision=decision,
                notes=notes,
            )
        except SignoffError as error:
            notes_problem = next((e.message for e in error.errors if e.field == "notes"), None)
            if notes_problem is not None:  # the modal stays open and says what is missing
                await ack(response_action="errors", errors={"notes": notes_problem})
                return
            await ack()
            await self._refused(user, channel, ts, bound, error)
            return
        await ack()
        await self._done(user, channel, ts, done)

    async def _on_edit(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        await slack_edits.submitted(self, ack, body, view)

    async def _decide(
        self,
        user: str,
        channel: str,
        ts: str,
        bound: chat.Bound,
        decision: Decision,
        notes: str | None,
    ) -> None:
        try:
            person = await chat.person_for(self.ctx, await self.email_of(user))
            done = await chat.decide(
                self.ctx,
                door=DOOR,
                chat_user=user,
                person=person,
                bound=bound,
                decision=decision,
                notes=notes,
            )
        except SignoffError as error:
            await self._refused(user, channel, ts, bound, error)
            return
        await self._done(user, channel, ts, done)

    async def _done(self, user: str, channel: str, ts: str, done: chat.Decided) -> None:
        """The change's outbox event redraws every card of the task (this one too)."""
        self.wake()
        if done.private:
            await self._tell_quietly(channel, user, done.private)

    async def _refused(
        self, user: str, channel: str, ts: str, bound: chat.Bound, error: SignoffError
    ) -> None:
        log.info("slack.refused", user=user, task_id=str(bound.task_id), code=error.error_code)
        text = f"Nothing was decided: {error.message}."
        if error.error_code is ErrorCode.STALE_REVISION:
            text = (
                f"Nothing was decided: this card showed revision {bound.revision}, and the "
                "task has changed since. The card now shows the current revision: review it "
                "and decide again."
            )
        await self._tell_quietly(channel, user, text)
        if channel and ts:
            await self.redraw(bound.task_id, channel, ts)

    async def _tell_quietly(self, channel: str, user: str, text: str) -> None:
        try:
            await self.tell(channel, user, text)
        except (SlackApiError, OSError) as error:
            log.warning("slack.tell_failed", error=str(error))


def _reason(error: SlackApiError) -> str:
    """What Slack said (``invalid_auth``, ``token_revoked``…), ``ratelimited`` for a 429,
    ``unreachable`` for an answer that is not Slack's (a proxy's 5xx page)."""
    if error.response.status_code == 429:
        return "ratelimited"
    data = error.response.data
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return "unreachable"


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _message_of(body: dict[str, Any]) -> tuple[str, str]:
    """The channel and message of the card clicked."""
    container = body.get("container") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id") or ""
    ts = container.get("message_ts") or (body.get("message") or {}).get("ts") or ""
    return str(channel), str(ts)


def install_slack(app: FastAPI) -> None:
    """``POST /slack/events``: events, interactivity and slash commands, verified by Bolt.
    The door itself is built when the application starts (``app.state.slack``)."""

    @app.post("/slack/events", include_in_schema=False)
    async def slack_events(request: Request) -> Response:
        door: SlackDoor | None = getattr(request.app.state, "slack", None)
        if door is None:
            return JSONResponse({"error": "the Slack door is starting"}, status_code=503)
        try:
            await read_bounded_body(request, MAX_REQUEST_BYTES, PayloadTooLarge)
        except PayloadTooLarge as error:
            return JSONResponse({"error": error.message}, status_code=413)
        try:
            return await door.handler.handle(request)
        except ValueError:  # Bolt reads the payload before anything else: not JSON
            return JSONResponse({"error": "the payload is not valid JSON"}, status_code=400)


def _a_chat_channel(door: SlackDoor) -> chat.ChatChannel:
    """The type checker holds the Slack door to the chat seam."""
    return door
