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

:class:`SignoffAPI` goes one step further: its hot requests skip FastAPI's middleware
stack too, and pass only through what that stack does for them — Starlette's
``ServerErrorMiddleware`` (an unhandled exception is a 500, and is raised on for the
server to log), then :class:`~signoff.api.latency.LatencyMiddleware` and
:class:`~signoff.api.guard.TextGuard` — before this lane. FastAPI's other layers do
nothing for these requests: the app sets no body-size limit of FastAPI's own (Signoff's
limit is read with the body) and no telemetry. When FastAPI's native OpenTelemetry
telemetry is switched on, or a middleware the short way does not know was added, every
request takes the whole stack, as before, and meets this lane inside it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from signoff.api.deps import bearer_token, get_context
from signoff.api.guard import TextGuard
from signoff.api.latency import LatencyMiddleware
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


def match(scope: Scope) -> tuple[str, Handler, str | None] | None:
    """The hot route a request is for: (template, handler, task id), or ``None``."""
    if scope["type"] == "http" and scope["method"] == "POST":
        path = scope["path"]
        for template, pattern, handler in ROUTES:
            found = pattern.fullmatch(path)
            if found is not None:
                return template, handler, found.groupdict().get("task_id")
    return None


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
        route = match(scope)
        if route is None:
            await self.app(scope, receive, send)
        else:
            await self._serve(scope, receive, send, *route)

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


class SignoffAPI(FastAPI):
    """The FastAPI application, whose hot task requests skip its middleware stack (see
    the module's text). Its :class:`FastLane` middleware must be added."""

    _hot_stack: ASGIApp | None = None
    _hot_stack_built = False
    _telemetry_seen: bool | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if match(scope) is None or self._telemetry_on():
            await super().__call__(scope, receive, send)
            return
        if not self._hot_stack_built:
            self._hot_stack = self._build_hot_stack()
            self._hot_stack_built = True
        if self._hot_stack is None:  # a middleware it does not know: the whole stack
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        await self._hot_stack(scope, receive, send)

    def _telemetry_on(self) -> bool:
        """Whether FastAPI's native telemetry is on, as the first hot request finds it.
        It is on once an OpenTelemetry provider is configured, which an application
        does as it starts (and OpenTelemetry never lets a provider be replaced); asking
        again on every request cost 2 % of the server's CPU under load."""
        if self._telemetry_seen is None:
            telemetry = getattr(self, "_native_telemetry", None)  # FastAPI 0.165's own
            self._telemetry_seen = telemetry is not None and bool(telemetry.enabled())
        return self._telemetry_seen

    def _build_hot_stack(self) -> ASGIApp | None:
        """The short way, or ``None`` when a middleware was added that it does not know
        (it might have something to do for these requests too)."""
        added = [getattr(m, "cls", None) for m in self.user_middleware]
        if added.count(FastLane) != 1:
            raise RuntimeError("SignoffAPI needs its FastLane middleware, added once")
        if any(cls not in _KNOWN_MIDDLEWARE for cls in added):
            return None
        lane = FastLane(_no_route, fastapi_app=self)
        handler = self.exception_handlers.get(500) or self.exception_handlers.get(Exception)
        return ServerErrorMiddleware(
            LatencyMiddleware(TextGuard(lane)), handler=handler, debug=self.debug
        )


#: The middleware the app adds, and what each does for a hot request: the lane serves it,
#: the text guard and the latency metric are in the short way too, and the console's
#: session middleware (single sign-on) has nothing to do for requests that authenticate
#: with an API key.
_KNOWN_MIDDLEWARE: frozenset[Any] = frozenset(
    {FastLane, TextGuard, LatencyMiddleware, SessionMiddleware}
)


async def _no_route(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError(f"no hot route for {scope['path']}")  # match() chose the route
