"""Request plumbing shared by the routers: context, caller, bodies, responses."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from signoff.api.schemas import Problem
from signoff.bodies import read_bounded_body
from signoff.domain.json_input import join_path, parse_json_strict
from signoff.domain.tasks import Principal
from signoff.domain.text_guard import body_problems
from signoff.errors import BadRequest, ErrorCode, FieldError, validation_error
from signoff.services import keys
from signoff.services.common import dumps
from signoff.services.context import ServiceContext

M = TypeVar("M", bound=BaseModel)


def get_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


async def _context(request: Request) -> ServiceContext:
    # async on purpose: FastAPI runs a plain ``def`` dependency in a worker thread.
    return get_context(request)


Context = Annotated[ServiceContext, Depends(_context)]


#: ``Authorization: Bearer <API key>``. ``auto_error=False``: a missing or malformed header
#: gets Signoff's own 401 problem (``ERR_UNAUTHENTICATED``), not FastAPI's.
bearer_scheme = HTTPBearer(auto_error=False, description="An API key: Bearer signoff_…")


def bearer_token(authorization: str | None) -> str | None:
    """The credentials of an ``Authorization: Bearer …`` header value, else ``None``."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


async def get_principal(
    context: Context,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)] = None,
) -> Principal:
    bearer = credentials.credentials.strip() if credentials is not None else None
    return await keys.authenticate(context, bearer or None)


Caller = Annotated[Principal, Depends(get_principal)]


def require_lease_token(x_lease_token: str | None) -> str:
    if not x_lease_token:
        raise BadRequest(
            "the X-Lease-Token header is required", error_code=ErrorCode.LEASE_TOKEN_REQUIRED
        )
    return x_lease_token


LeaseTokenHeader = Annotated[str | None, Header(include_in_schema=False)]


def require_execution_token(x_execution_token: str | None) -> str:
    if not x_execution_token:
        raise BadRequest(
            "the X-Execution-Token header is required",
            error_code=ErrorCode.EXECUTION_TOKEN_REQUIRED,
        )
    return x_execution_token


ExecutionTokenHeader = Annotated[str | None, Header(include_in_schema=False)]


def required_header(name: str, description: str) -> dict[str, Any]:
    """An OpenAPI parameter for a header the service requires but checks itself (so a
    missing one gets its documented problem, not a generic validation error)."""
    return {
        "name": name,
        "in": "header",
        "required": True,
        "schema": {"type": "string", "minLength": 1},
        "description": description,
    }


LEASE_TOKEN_PARAMETER = required_header(
    "X-Lease-Token",
    "The lease token returned by the claim (400 ERR_LEASE_TOKEN_REQUIRED when missing).",
)

EXECUTION_TOKEN_PARAMETER = required_header(
    "X-Execution-Token",
    "The execution token returned by the execute grant "
    "(400 ERR_EXECUTION_TOKEN_REQUIRED when missing).",
)


async def read_body(request: Request) -> bytes:
    """The raw body, refusing more than ``SIGNOFF_MAX_BODY_BYTES`` (413
    ``ERR_PAYLOAD_TOO_LARGE``) while it streams in: never more than the limit in memory.
    Every body the API reads (JSON or form) comes through here."""
    return await read_bounded_body(request, get_context(request).settings.max_body_bytes)


async def read_json_body(request: Request, *, empty_as: Any = None) -> Any:
    """Read (see :func:`read_body`) and strictly parse the body. An optional body is absent
    only when it has no bytes at all: anything else, whitespace alone included, must be a
    JSON text (RFC 8259), or it is 400 ``ERR_MALFORMED_JSON``."""
    raw = await read_body(request)
    if not raw and empty_as is not None:
        return empty_as
    value = parse_json_strict(raw)
    problems = body_problems(value)  # the one text guard (signoff.domain.text_guard)
    if problems:
        raise validation_error(problems)
    return value


async def read_model(request: Request, model: type[M], *, optional: bool = False) -> M:
    """Parse the body into ``model``; an empty body means ``{}`` when ``optional``."""
    data = await read_json_body(request, empty_as={} if optional else None)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = []
        for item in exc.errors():
            path = ""
            for part in item["loc"]:
                path = join_path(path, part if isinstance(part, int) else str(part))
            errors.append(FieldError(path or "(root)", item["msg"]))
        raise validation_error(errors) from None


def json_response(
    content: Any, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = content if isinstance(content, str) else dumps(content)
    return Response(body, status_code=status_code, media_type="application/json", headers=headers)


def body_doc(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON request body we parse ourselves."""
    cleaned = {k: v for k, v in schema.items() if k != "$schema"}
    return {
        "requestBody": {"required": required, "content": {"application/json": {"schema": cleaned}}}
    }


def model_body_doc(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    return body_doc(model.model_json_schema(), required=required)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for problem details: 401 and 403 always, plus ``statuses``."""
    return {
        status: {"model": Problem, "content": {"application/problem+json": {}}}
        for status in (401, 403, *statuses)
    }
