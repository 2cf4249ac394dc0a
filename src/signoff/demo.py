"""``signoff serve --demo``: demo content (see :mod:`signoff.services.demo`), a receiver
for its webhooks inside the server, and the tour printed at start-up."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import JSONResponse, Response

from signoff.bodies import read_bounded_body
from signoff.domain.clock import SystemClock
from signoff.services import demo
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import open_database
from signoff.webhooks import WebhookVerificationError, verify

RECEIVED_KEPT = 50


async def seed_demo(settings: Settings) -> demo.DemoTour:
    """Create the demo content once (later runs find it)."""
    database = open_database(settings)
    try:
        context = ServiceContext(database=database, settings=settings, clock=SystemClock())
        return await demo.populate(context, base_url=settings.listening_url)
    finally:
        await database.dispose()


def install_receiver(app: FastAPI, secret: str) -> None:
    """``POST /demo/receiver`` verifies each delivery like a real receiver would (and
    answers 401 to a bad signature); ``GET /demo/receiver`` lists what it received."""
    received: deque[dict[str, Any]] = deque(maxlen=RECEIVED_KEPT)
    router = APIRouter(include_in_schema=False)

    @router.post(demo.RECEIVER_PATH)
    async def receive(request: Request) -> Response:
        body = await read_bounded_body(request, request.app.state.context.settings.max_body_bytes)
        try:
            verify(request.headers, body, secret)
        except WebhookVerificationError:
            return Response(status_code=401)
        event = json.loads(body)
        data = event.get("data") or {}
        received.appendleft(
            {
                "webhook_id": request.headers.get("webhook-id"),
                "signature_verified": True,
                "type": event.get("type"),
                "task_id": data.get("id"),
                "status": data.get("status"),
                "decision": data.get("decision"),
                "created_at": event.get("created_at"),
            }
        )
        return Response(status_code=204)

    @router.get(demo.RECEIVER_PATH)
    async def show() -> JSONResponse:
        return JSONResponse({"received": list(received)})

    app.include_router(router)


def tour(tour: demo.DemoTour, settings: Settings) -> list[str]:
    """The lines printed after the keys: what to open or curl next."""
    base = settings.public_base_url.rstrip("/")
    t = tour.tasks
    auth = '-H "Authorization: Bearer $REVIEWER"'
    reviewer, admin = tour.console
    return [
        "Demo ready (running --demo again adds nothing). The demo keys and link are public:",
        "never use --demo on a server others can reach.",
        f"  REVIEWER={tour.reviewer_key}",
        f"  PRODUCER={tour.producer_key}",
        "Console sign-in (passwords are new at each start; shown only here):",
        *(
            f"  {person.role.value}: username {person.principal_id}  password {person.password}"
            for person in tour.console
        ),
        "Try:",
        f"  open {base}/console",
        f"      the review console: sign in as {reviewer.principal_id}, press n to claim the "
        "next task, then approve or reject it",
        f"      as {admin.principal_id}: People (in the header) adds a person and shows "
        "their set-password link",
        f"  open {tour.link}",
        "      the page a notified reviewer gets: approve or reject the held payment",
        f"  curl -s {base}/tasks {auth}",
        "      the queue: a payment, an article, a refund near its deadline, a decided task",
        f"  curl -s '{base}/tasks/{t['article']}/diff?from=1&to=2' {auth}",
        "      what changed between the article's two revisions (approvals bind to one)",
        f"  curl -s {base}/tasks/{t['refund']} {auth}",
        "      deadline_at, escalation_level and the policy: remind, reassign, expire",
        f"  curl -s {base}{demo.RECEIVER_PATH}",
        "      the signed webhooks the demo receiver verified since this start",
        f"  curl -s {base}/tasks/{t['decided']}/deliveries {auth}",
        "      every delivery of the decided task's events, each attempt with its answer",
        f"  signoff slack-card {t['article']}",
        "      the article's Slack card as the Slack door posts it (Block Kit JSON), no "
        "Slack needed",
        f"  open {base}/docs",
        '      every operation; "Authorize" with a key and try it out',
    ]
