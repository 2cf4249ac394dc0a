"""A local fake of Slack for the tests: the Web API methods the Slack door uses, recorded;
interactivity posts signed as Slack signs them; and a Socket Mode WebSocket.

Served by aiohttp on a loopback port in a thread of its own. The real slack_sdk / Bolt
clients talk to it through ``SIGNOFF_SLACK_API_URL`` (:attr:`SlackFake.api_url`). It can
answer 429 with ``Retry-After`` (:meth:`SlackFake.rate_limit`), be down
(:attr:`SlackFake.down`: every Web API call answers 503), and do a call but lose its answer
(:meth:`SlackFake.lose_answer`: the window in which a process dies after Slack accepted a
post). Posted messages are kept per channel with their metadata
(:attr:`SlackFake.messages`) and read back by ``conversations.history``; a message's
``ts`` is the time of :attr:`SlackFake.clock` (the tests' clock, as the server's).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
from aiohttp import WSMsgType, web

SIGNING_SECRET = "fake-signing-secret-0123456789"
BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str | None
    answer: dict[str, Any] = field(default_factory=dict)


@dataclass
class Member:
    id: str
    email: str | None
    confirmed: bool = True
    deleted: bool = False


@dataclass
class SlackFake:
    port: int = 0
    calls: list[Call] = field(default_factory=list)
    members: dict[str, Member] = field(default_factory=dict)
    down: bool = False
    revoked: bool = False
    _limited: dict[str, list[int]] = field(default_factory=dict)
    _refusals: dict[str, str] = field(default_factory=dict)
    _ts: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _loop: asyncio.AbstractEventLoop | None = None
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _acks: dict[str, Any] = field(default_factory=dict)
    #: Each channel's messages, oldest first: ``ts``, ``text``, ``blocks``, ``metadata``.
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Slack's clock (seconds since the epoch): the ``ts`` of a message posted now.
    clock: Callable[[], float] = time.time
    _lost: list[tuple[str, str | None, str]] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def add_member(self, user: str, email: str | None, **flags: Any) -> None:
        self.members[user] = Member(user, email, **flags)

    def refuse(self, method: str, error: str) -> None:
        """The next call of ``method`` answers ``{"ok": false, "error": error}``."""
        self._refusals[method] = error

    def rate_limit(self, method: str, times: int, retry_after: int = 0) -> None:
        """The next ``times`` calls of ``method`` answer 429 with ``Retry-After``."""
        self._limited[method] = [retry_after] * times

    def lose_answer(
        self, method: str, times: int = 1, how: str = "500", channel: str | None = None
    ) -> None:
        """The next ``times`` calls of ``method`` (to ``channel``, if named) are done (a
        post is posted) but their answer is lost: a 500 that is not Slack's JSON
        (``how="500"``), or the connection closed without an answer (``how="drop"``)."""
        self._lost.extend([(method, channel, how)] * times)

    def in_channel(self, channel: str, task_id: str) -> list[dict[str, Any]]:
        """The messages in ``channel`` that show the task (its id in them)."""
        with self._changed:
            return [m for m in self.messages.get(channel, []) if task_id in json.dumps(m)]

    # Reading what was called -------------------------------------------------------------

    def called(self, method: str) -> list[Call]:
        with self._changed:
            return [c for c in self.calls if c.method == method]

    def opened(self) -> list[dict[str, Any]]:
        """The views ``views.open`` opened, as Slack answered them (with their ids)."""
        return [dict(c.answer["view"]) for c in self.called("views.open") if c.answer.get("ok")]

    def wait_for(
        self, method: str, predicate: Callable[[Call], bool] = lambda c: True, count: int = 1
    ) -> list[Call]:
        """Block until ``count`` calls of ``method`` match (the door works after its ack)."""
        deadline = time.monotonic() + 15
        with self._changed:
            while True:
                found = [c for c in self.calls if c.method == method and predicate(c)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"no {method} call came: {[c.method for c in self.calls]}"
                self._changed.wait(left)

    # The Web API -------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.content_type == "application/json":
            params = await request.json()
        else:
            params = dict(await request.post())
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") or params.get("token")
        if self.down:
            return web.Response(status=503, text="Slack is down")
        limited = self._limited.get(method)
        if limited:
            retry_after = limited.pop(0)
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(retry_after)},
            )
        refusal = self._refusals.pop(method, None)
        if self.revoked or refusal:
            answer = {"ok": False, "error": refusal or "token_revoked"}
        else:
            answer = self._answer(method, params, token)
        with self._changed:
            self.calls.append(Call(method, params, token, answer))
            self._changed.notify_all()
        for lost in self._lost:
            if lost[0] == method and lost[1] in (None, params.get("channel")):
                self._lost.remove(lost)
                if lost[2] == "drop" and request.transport is not None:
                    request.transport.close()
                return web.Response(status=500, text="upstream timed out")
        return web.json_response(answer)

    def _answer(self, method: str, params: dict[str, Any], token: str | None) -> dict[str, Any]:
        if method == "auth.test":
            return {"ok": True, "team": "Fake", "user_id": "UBOT", "bot_id": "BBOT"}
        if method == "apps.connections.open":
            if token != APP_TOKEN:
                return {"ok": False, "error": "invalid_auth"}
            return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket"}
        if method == "chat.postMessage":
            ts = f"{int(self.clock())}.{next(self._ts):06d}"
            shown = {k: params.get(k) for k in ("text", "blocks", "metadata") if k in params}
            with self._changed:
                self.messages.setdefault(params["channel"], []).append({"ts": ts, **shown})
            return {"ok": True, "channel": params["channel"], "ts": ts, "message": params}
        if method == "chat.update":
            with self._changed:
                for message in self.messages.get(params["channel"], []):
                    if message["ts"] == params["ts"]:
                        message.update({k: params[k] for k in ("text", "blocks") if k in params})
            return {"ok": True, "channel": params["channel"], "ts": params["ts"]}
        if method == "conversations.history":
            return self._history(params)
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{time.time():.6f}"}
        if method == "views.open":
            if not params.get("trigger_id") or not isinstance(params.get("view"), dict):
                return {"ok": False, "error": "invalid_arguments"}
            return {"ok": True, "view": {"id": "V" + uuid.uuid4().hex[:8], **params["view"]}}
        if method == "conversations.open":
            return {"ok": True, "channel": {"id": "D" + str(params.get("users"))}}
        if method == "users.info":
            member = self.members.get(str(params.get("user")))
            if member is None:
                return {"ok": False, "error": "user_not_found"}
            return {"ok": True, "user": _member(member)}
        if method == "users.lookupByEmail":
            for member in self.members.values():
                if (member.email or "").lower() == str(params.get("email")).lower():
                    return {"ok": True, "user": _member(member)}
            return {"ok": False, "error": "users_not_found"}
        return {"ok": False, "error": "unknown_method"}

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        """``conversations.history``: newest first, after ``oldest`` and before ``latest``
        (either one included with ``inclusive``), at most ``limit``; a message's
        ``metadata`` only with ``include_all_metadata``."""
        inclusive = params.get("inclusive") in (True, "true", "1", 1)
        oldest, latest = float(params.get("oldest") or 0), params.get("latest")
        limit = int(params.get("limit") or 100)
        found = []
        with self._changed:
            for message in reversed(self.messages.get(str(params.get("channel")), [])):
                at = float(message["ts"])
                if at < oldest or (at == oldest and not inclusive):
                    continue
                if latest is not None and (
                    at > float(latest) or (at == float(latest) and not inclusive)
                ):
                    continue
                shown = {"type": "message", "ts": message["ts"], "text": message.get("text")}
                if params.get("include_all_metadata") in (True, "true", "1", 1):
                    shown["metadata"] = message.get("metadata")
                found.append(shown)
        return {"ok": True, "messages": found[:limit], "has_more": len(found) > limit}

    # Socket Mode -------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        await socket.send_json({"type": "hello", "num_connections": 1})
        self._sockets.append(socket)
        async for message in socket:
            if message.type == WSMsgType.TEXT:
                data = json.loads(message.data)
                with self._changed:
                    self._acks[data.get("envelope_id")] = data.get("payload")
                    self._changed.notify_all()
        self._sockets.remove(socket)
        return socket

    def socket_connected(self) -> bool:
        deadline = time.monotonic() + 15
        while not self._sockets and time.monotonic() < deadline:
            time.sleep(0.01)
        return bool(self._sockets)

    def send_over_socket(self, payload: dict[str, Any]) -> Any:
        """An interactivity payload over Socket Mode; returns the app's acknowledgement."""
        envelope = str(uuid.uuid4())
        message = {
            "envelope_id": envelope,
            "type": "interactive",
            "payload": payload,
            "accepts_response_payload": payload.get("type") == "view_submission",
        }
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._sockets[0].send_json(message), self._loop).result(5)
        deadline = time.monotonic() + 15
        with self._changed:
            while envelope not in self._acks:
                left = deadline - time.monotonic()
                assert left > 0, "the app did not acknowledge the envelope"
                self._changed.wait(left)
            return self._acks[envelope]

    # Signed interactivity posts -----------------------------------------------------------

    @staticmethod
    def signed(
        payload: dict[str, Any], *, secret: str = SIGNING_SECRET, at: float | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """A body and headers as Slack posts an interaction: the form field ``payload``,
        ``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` (v0, HMAC-SHA256)."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        timestamp = str(int(at if at is not None else time.time()))
        base = b"v0:" + timestamp.encode() + b":" + body
        signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        return body, {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature,
        }

    @staticmethod
    def signed_headers(body: bytes, *, secret: str = SIGNING_SECRET) -> dict[str, str]:
        """Slack's headers for any body (signed now)."""
        timestamp = str(int(time.time()))
        base = b"v0:" + timestamp.encode() + b":" + body
        signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
        return {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature,
        }

    def post_interaction(
        self, base_url: str, payload: dict[str, Any], **signing: Any
    ) -> httpx.Response:
        body, headers = self.signed(payload, **signing)
        return httpx.post(f"{base_url}/slack/events", content=body, headers=headers, timeout=15)


def _member(member: Member) -> dict[str, Any]:
    return {
        "id": member.id,
        "deleted": member.deleted,
        "is_email_confirmed": member.confirmed,
        "profile": {"email": member.email} if member.email else {},
    }


def block_action(
    user: str, channel: str, ts: str, action_id: str, value: str, trigger: str = "T1"
) -> dict[str, Any]:
    """A ``block_actions`` payload: ``user`` pressed a button of the message ``ts``."""
    return {
        "type": "block_actions",
        "team": {"id": "TFAKE"},
        "user": {"id": user},
        "api_app_id": "AFAKE",
        "trigger_id": trigger,
        "container": {"type": "message", "channel_id": channel, "message_ts": ts},
        "channel": {"id": channel},
        "message": {"ts": ts},
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "signoff_decisions",
                "value": value,
            }
        ],
    }


def view_submission(
    user: str,
    view: dict[str, Any],
    notes: str | None = None,
    edits: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """A ``view_submission`` payload as Slack posts it: ``user`` submitted ``view`` (as
    ``views.open`` answered it, or as it was opened). ``view.state.values`` holds every
    input of the view, ``{block_id: {action_id: {"type", "value"}}}``: the ``notes``
    input holds ``notes``, any other the value ``edits`` gives its block, else its
    ``initial_value`` (what Slack sends for an input left as it was prefilled; ``None``,
    Slack's emptied input). A block named in ``edits`` that the view lacks is sent too
    (a forged form)."""
    typed = dict(edits or {})
    values: dict[str, Any] = {}
    for block in view.get("blocks") or []:
        if block.get("type") != "input":
            continue
        element, block_id = block["element"], block["block_id"]
        value = notes if block_id == "notes" else typed.pop(block_id, element.get("initial_value"))
        values[block_id] = {element["action_id"]: {"type": element["type"], "value": value}}
    for block_id, value in typed.items():
        values[block_id] = {"value": {"type": "plain_text_input", "value": value}}
    return {
        "type": "view_submission",
        "team": {"id": "TFAKE", "domain": "fake"},
        "user": {"id": user, "team_id": "TFAKE"},
        "api_app_id": "AFAKE",
        "token": "legacy-verification-token",
        "trigger_id": "T-SUBMIT",
        "view": {
            "id": view.get("id") or "VFAKE",
            "team_id": "TFAKE",
            "app_id": "AFAKE",
            "hash": "1700000000.fake",
            "previous_view_id": None,
            "root_view_id": view.get("id") or "VFAKE",
            **view,
            "state": {"values": values},
        },
        "response_urls": [],
        "is_enterprise_install": False,
    }


@contextmanager
def slack_fake() -> Iterator[SlackFake]:
    fake = SlackFake()
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        fake._loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_post("/api/{method}", fake._api)
        app.router.add_get("/socket", fake._socket)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        fake.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        await stop.wait()
        for socket in list(fake._sockets):
            await socket.close()
        await runner.cleanup()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield fake
    finally:
        assert fake._loop is not None
        assert stop is not None
        fake._loop.call_soon_threadsafe(stop.set)
        thread.join(10)
