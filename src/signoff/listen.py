"""``signoff listen``: a small webhook receiver for trying Signoff out.

It listens on ``127.0.0.1:<port>``, verifies every delivery with
:func:`signoff.webhooks.verify` (Standard Webhooks headers, 5-minute tolerance) against
the endpoint's secret, answers 204 to a good one and 401 to a bad one, and prints one
line per event on stdout (``--json``: the whole envelope). Repeats of an event id (at
least once delivery) are acknowledged and marked as repeats.

``--register URL`` (with an admin key) creates the webhook endpoint for this receiver on
the Signoff at URL, or rotates the secret of the one already there, so one command is
enough and re-running it is harmless.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

import httpx

from signoff.webhooks import WebhookVerificationError, verify

MAX_BODY = 1024 * 1024


def describe(event: dict[str, Any]) -> str:
    """One line for an event envelope: type, task, and what was decided."""
    data = event.get("data") if isinstance(event.get("data"), dict) else {}
    assert isinstance(data, dict)
    parts = [str(event.get("type", "?")), f"task {data.get('id', '?')}"]
    if data.get("status"):
        parts.append(f"status {data['status']}")
    if data.get("decision"):
        parts.append(f"decision {data['decision']}")
    if data.get("operator_id"):
        parts.append(f"by {data['operator_id']}")
    if data.get("notes"):
        parts.append(f"notes {json.dumps(data['notes'], ensure_ascii=False)}")
    return "  ".join(parts)


class Receiver:
    """Verifies and prints deliveries; ``stop_after`` ends the server after that many
    distinct events of ``stop_on`` type (any type when ``None``)."""

    def __init__(
        self,
        secret: str,
        *,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
        as_json: bool = False,
        stop_after: int | None = None,
        stop_on: str | None = None,
    ) -> None:
        self.secret, self.out, self.err, self.as_json = secret, out, err, as_json
        self.stop_after, self.stop_on = stop_after, stop_on
        self.seen: set[str] = set()
        self.matched = 0
        self.lock = threading.Lock()
        self.on_done: Callable[[], None] = lambda: None

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        try:
            verify(headers, body, self.secret)
        except WebhookVerificationError as exc:
            print(f"rejected a delivery: {exc} (is the secret right?)", file=self.err, flush=True)
            return 401
        try:
            event = json.loads(body)
        except ValueError:
            print("rejected a delivery: the body is not JSON", file=self.err, flush=True)
            return 400
        event_id = headers.get("webhook-id", str(event.get("id")))
        with self.lock:
            repeat = event_id in self.seen
            self.seen.add(event_id)
            text = json.dumps(event, ensure_ascii=False) if self.as_json else describe(event)
            print(text + ("  (repeat)" if repeat else ""), file=self.out, flush=True)
            if not repeat and (self.stop_on is None or event.get("type") == self.stop_on):
                self.matched += 1
                if self.stop_after is not None and self.matched >= self.stop_after:
                    self.on_done()
        return 204


def serve(receiver: Receiver, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY:
                self.send_response(413)
                self.end_headers()
                return
            body = self.rfile.read(length)
            status = receiver.handle({k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return  # one line per event is printed by the receiver instead

    server = ThreadingHTTPServer((host, port), Handler)
    receiver.on_done = lambda: threading.Thread(target=server.shutdown, daemon=True).start()
    return server


def register(base_url: str, admin_key: str, receiver_url: str) -> tuple[str, str]:
    """Create the endpoint for ``receiver_url`` or rotate the secret of the existing one.
    Returns ``(endpoint id, secret)``."""
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=30) as client:
        listed = client.get("/webhook-endpoints")
        _raise_for_problem(listed)
        for endpoint in listed.json()["items"]:
            if endpoint["url"] == receiver_url:
                rotated = client.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret")
                _raise_for_problem(rotated)
                if not endpoint["enabled"]:
                    _raise_for_problem(
                        client.patch(f"/webhook-endpoints/{endpoint['id']}", json={"enabled": True})
                    )
                return str(endpoint["id"]), str(rotated.json()["secret"])
        created = client.post(
            "/webhook-endpoints",
            json={"url": receiver_url, "description": "signoff listen (local receiver)"},
        )
        _raise_for_problem(created)
        return str(created.json()["id"]), str(created.json()["secret"])


class RegistrationError(Exception):
    pass


def _raise_for_problem(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        problem = response.json()
        message = f"{problem.get('error_code')}: {problem.get('message')}"
    except ValueError:
        message = response.text[:200]
    hint = ""
    if response.status_code == 422 and "WEBHOOK_URL_FORBIDDEN" in message:
        hint = " (a receiver on this machine needs SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true)"
    raise RegistrationError(f"Signoff answered {response.status_code} {message}{hint}")
