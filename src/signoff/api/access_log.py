"""The access log, as structured log lines (``event: http.request``).

uvicorn's own access log is switched off (``signoff serve`` passes ``access_log=False``):
it wrote request lines verbatim, and a resume link's path *is* its token. Here every
path goes through :func:`signoff.logs.redact` first, so ``/r/<token>`` is logged as
``/r/[redacted]``.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.logs import redact

log = structlog.get_logger("signoff.access")


class AccessLog:
    """Pure ASGI middleware: one line per HTTP request, after the response started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: dict[str, Any] = {"code": 500}

        async def send_with_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            client = scope.get("client")
            log.info(
                "http.request",
                method=scope.get("method"),
                path=redact(scope.get("path", "")),
                status=status["code"],
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
                client=client[0] if client else None,
            )
