"""Request latency per route (``signoff_http_request_duration_seconds``), as a plain ASGI
middleware: the route template labels the histogram (``/tasks/{task_id}/claim``), so ids
never become label values."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.metrics import REQUEST_SECONDS, child


class LatencyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            route: Any = scope.get("route")
            child(REQUEST_SECONDS, scope["method"], getattr(route, "path", "-")).observe(
                time.perf_counter() - started
            )
