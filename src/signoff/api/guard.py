"""The request boundary's text guard for path segments and query values (JSON bodies are
guarded in :func:`signoff.api.deps.read_json_body`); see :mod:`signoff.domain.text_guard`."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.api.problems import problem_response
from signoff.domain.text_guard import parameter_problems
from signoff.errors import validation_error


class TextGuard:
    """Pure ASGI middleware: a 422 ``ERR_VALIDATION`` before any route runs when a path
    segment or query value could not be stored or compared by the database."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = parse_qsl(
                scope.get("query_string", b"").decode("latin-1"),
                keep_blank_values=True,
                errors="replace",  # as Starlette decodes it for the routes
            )
            problems = parameter_problems(scope.get("path", "").split("/"), query)
            if problems:
                response = problem_response(validation_error(problems))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
