"""RFC 9457 problem details: the one place errors become HTTP responses.

Every error body looks like::

    {"type": "urn:signoff:problem:ERR_TASK_CONFLICT", "title": "Conflict", "status": 409,
     "detail": "...", "error_code": "ERR_TASK_CONFLICT", "message": "...",
     "errors": [{"field": "diagnostic_bundle.trace_id", "message": "is required"}], ...}

served as ``application/problem+json``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from signoff.domain.json_input import join_path
from signoff.errors import (
    ErrorCode,
    FieldError,
    NotReady,
    SignoffError,
    TooManyRequests,
    Unauthenticated,
    validation_error,
)
from signoff.store.runtime.availability import DATABASE_ERRORS, classify

log = structlog.get_logger("signoff.api")

PROBLEM_JSON = "application/problem+json"


def status_for(error: SignoffError) -> int:
    """The status its code goes with (``signoff.errors.ErrorCode``)."""
    return error.error_code.status or 500


def problem_body(error: SignoffError, status: int) -> dict[str, Any]:
    body: dict[str, Any] = dict(error.extra)
    body |= {
        "type": f"urn:signoff:problem:{error.error_code}",
        "title": error.title,
        "status": status,
        "detail": error.message,
        "error_code": error.error_code,
        "message": error.message,
    }
    if error.errors:
        body["errors"] = [{"field": e.field, "message": e.message} for e in error.errors]
    return body


def problem_response(error: SignoffError) -> Response:
    status = status_for(error)
    headers = {}
    if isinstance(error, Unauthenticated):
        headers["WWW-Authenticate"] = 'Bearer realm="signoff"'
    if isinstance(error, NotReady):
        headers["Retry-After"] = "1"
    if isinstance(error, TooManyRequests) and "retry_after" in error.extra:
        headers["Retry-After"] = str(error.extra["retry_after"])
    content = json.dumps(problem_body(error, status), ensure_ascii=False)
    return Response(content, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _request_validation(exc: RequestValidationError) -> SignoffError:
    errors = []
    for item in exc.errors():
        location = [
            part for part in item.get("loc", ()) if part not in ("query", "path", "header", "body")
        ]
        path = ""
        for part in location:
            path = join_path(path, part if isinstance(part, int) else str(part))
        errors.append(FieldError(path or "(request)", str(item.get("msg", "is invalid"))))
    return validation_error(errors)


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API documents for this path (Starlette names only the first route
    that matched the path)."""
    paths = request.app.openapi()["paths"]
    path = request.url.path
    if path in paths:  # a literal path wins over templates it also fits (/tasks/claim-next)
        return sorted(method.upper() for method in paths[path])
    methods: set[str] = set()
    for template, operations in paths.items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {method.upper() for method in operations}
    return sorted(methods)


def _internal_error() -> Response:
    """A database error that is not an outage: a bug, answered without its details."""
    return Response(
        json.dumps(
            {
                "type": "about:blank",
                "title": "Internal error",
                "status": 500,
                "error_code": ErrorCode.INTERNAL,
                "message": "internal error",
            }
        ),
        status_code=500,
        media_type=PROBLEM_JSON,
    )


async def http_problem(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's own errors (no route, wrong method) as problem documents."""
    code = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}.get(
        exc.status_code, ErrorCode.HTTP
    )
    error = SignoffError(str(exc.detail), error_code=code)
    error.title = str(exc.detail)
    body = problem_body(error, exc.status_code)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return Response(
        json.dumps(body), status_code=exc.status_code, media_type=PROBLEM_JSON, headers=headers
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Replace FastAPI's default error shapes with problem details."""

    @app.exception_handler(SignoffError)
    async def _signoff(_request: Request, exc: SignoffError) -> Response:
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> Response:
        return problem_response(_request_validation(exc))

    app.add_exception_handler(StarletteHTTPException, http_problem)  # type: ignore[arg-type]

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, _exc: ClientDisconnect) -> Response:
        # The client closed its connection before its body had arrived (or the server
        # closed it for arriving too slowly): there is nobody to answer and nothing wrong
        # with the server, so one info line and no traceback. The answer is never sent.
        log.info("request.client_gone", method=request.method, path=request.url.path)
        return Response(status_code=400)

    async def _database_failure(_request: Request, exc: Exception) -> Response:
        # Every database failure, from SQLAlchemy, the hot path's asyncpg statements,
        # SQLite's thread or the network: an outage is a 503 whose message names its cause.
        outage = classify(exc)
        if outage is None:
            log.error("database.error", error=str(exc)[:500])
            return _internal_error()
        log.warning("database.unavailable", cause=outage.cause, error=outage.error)
        return problem_response(NotReady(outage.message, error_code=ErrorCode.NOT_READY))

    for kind in DATABASE_ERRORS:
        app.add_exception_handler(kind, _database_failure)

    async def _unhandled(request: Request, exc: Exception) -> Response:
        # The server's last resort (ServerErrorMiddleware, here and in the fast lane):
        # still a problem document, and a 503 for a database failure wrapped in
        # something no handler above matched (an exception group).
        if classify(exc) is not None:
            return await _database_failure(request, exc)
        return _internal_error()

    app.add_exception_handler(500, _unhandled)
