"""The hot task endpoints without FastAPI's per-request machinery.

Escalate, claim, claim-next, renew, release and resolve are most of what a busy Signoff
answers, and for them FastAPI's routing and dependency resolution cost as much CPU as
the work itself: none of them has a parameter FastAPI validates (bodies, the bearer key
and the lease token are read by Signoff's own code). This ASGI layer, inside the text
guard and the latency middleware and in front of FastAPI, matches those six routes and
calls **the very route functions** of :mod:`signoff.api.routes.tasks` with the context,
the caller (:func:`signoff.services.keys.authenticate`) and the header FastAPI would have
passed. An exception becomes its answer through the handlers
:func:`signoff.api.problems.install_problem_handlers` registered on the app, looked up
the way Starlette looks them up. Everything else — other methods and paths, the OpenAPI
document that still describes these routes — is FastAPI's.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.api.deps import bearer_token, get_context
from signoff.api.routes import tasks
from signoff.services import keys
from signoff.services.context import ServiceContext

Handler = Callable[[Request, ServiceContext, Any, str | None], Awaitable[Response]]

_TASK = r"(?P<task_id>[^/]+)"


def _escalate(request: Request, ctx: ServiceContext, caller: Any, _id: str | None) -> Any:
    return tasks.escalate(request, ctx, caller)


def _claim_next(request: Request, ctx: ServiceContext, caller: Any, _id: str | None) -> Any:
    return tasks.claim_next(request, ctx, caller)


def _claim(request: Request, ctx: ServiceContext, caller: Any, task_id: str | None) -> Any:
    return tasks.claim(str(task_id), request, ctx, caller)


def _lease_token(request: Request) -> str | None:
    return request.headers.get("x-lease-token")


def _renew(request: Request, ctx: ServiceContext, caller: Any, task_id: str | None) -> Any:
    return tasks.renew(str(task_id), ctx, caller, _lease_token(request))


def _release(request: Request, ctx: ServiceContext, caller: Any, task_id: str | None) -> Any:
    return tasks.release(str(task_id), ctx, caller, _lease_token(request))


def _resolve(request: Request, ctx: ServiceContext, caller: Any, task_id: str | None) -> Any:
    return tasks.resolve(str(task_id), request, ctx, caller, _lease_token(request))


#: (template as FastAPI knows it, pattern, handler); literal paths first.
ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = tuple(
    (template, re.compile(pattern), handler)
    for template, pattern, handler in (
        ("/tasks/escalate", r"/tasks/escalate", _escalate),
        ("/tasks/claim-next", r"/tasks/claim-next", _claim_next),
        ("/tasks/{task_id}/claim", rf"/tasks/{_TASK}/claim", _claim),
        ("/tasks/{task_id}/lease/renew", rf"/tasks/{_TASK}/lease/renew", _renew),
        ("/tasks/{task_id}/release", rf"/tasks/{_TASK}/release", _release),
        ("/tasks/{task_id}/resolve", rf"/tasks/{_TASK}/resolve", _resolve),
    )
)


class FastLane:
    """ASGI middleware; ``fastapi_app`` is the application whose routes and exception
    handlers it stands in for."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        posts = {
            getattr(r, "path", ""): r
            for r in tasks.router.routes
            if "POST" in (getattr(r, "methods", None) or ())
        }
        #: The routes' own objects (``scope["route"]``: what the latency metric labels by).
        self.routes: dict[str, BaseRoute] = {template: posts[template] for template, *_ in ROUTES}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            for template, pattern, handler in ROUTES:
                match = pattern.fullmatch(path)
                if match is not None:
                    task_id = match.groupdict().get("task_id")
                    await self._serve(scope, receive, send, template, handler, task_id)
                    return
        await self.app(scope, receive, send)

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        template: str,
        handler: Handler,
        task_id: str | None,
    ) -> None:
        scope["route"] = self.routes[template]
        scope.setdefault("app", self.fastapi_app)
        request = Request(scope, receive)
        try:
            context = get_context(request)
            caller = await keys.authenticate(
                context, bearer_token(request.headers.get("authorization"))
            )
            response = await handler(request, context, caller, task_id)
        except Exception as exc:
            response = await self._problem(request, exc)
        await response(scope, receive, send)

    async def _problem(self, request: Request, exc: Exception) -> Response:
        handlers = self.fastapi_app.exception_handlers
        for cls in type(exc).__mro__:
            handler = handlers.get(cls)
            if handler is not None:
                answer = handler(request, exc)
                return await answer if inspect.isawaitable(answer) else answer
        raise exc  # no handler: the server's error middleware answers 500, as for FastAPI
