"""API keys (admin) and health probes."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from signoff.api.deps import Caller, Context, json_response, model_body_doc, problems, read_model
from signoff.api.schemas import ApiKeyCreated, ApiKeyListOut, CreateApiKeyRequest, WhoAmIOut
from signoff.domain.clock import rfc3339
from signoff.domain.states import Role
from signoff.domain.tasks import require_role
from signoff.metrics import exposition
from signoff.services import keys

router = APIRouter()


@router.get("/healthz", tags=["health"], summary="Liveness (no authentication)")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    tags=["health"],
    response_model=None,
    responses={200: {"description": "The database answers"}, **problems(503)},
    summary="Readiness: the database answers",
)
async def readyz(context: Context, _caller: Caller) -> Response:
    await context.database.ping()
    return json_response({"status": "ready", "database": context.database.dialect})


@router.get(
    "/me",
    tags=["api-keys"],
    response_model=None,
    responses={200: {"model": WhoAmIOut}, **problems()},
    summary="Who the caller is: principal, role and groups (any role)",
)
async def who_am_i(caller: Caller) -> Response:
    """The principal behind the credentials. The SDK scopes the escalation ids it derives
    from a caller's key by this principal, so two producers may use the same key."""
    return json_response(
        {
            "principal_id": caller.principal_id,
            "role": caller.role.value,
            "groups": list(caller.groups),
        }
    )


@router.post(
    "/api-keys",
    tags=["api-keys"],
    status_code=201,
    response_model=None,
    openapi_extra=model_body_doc(CreateApiKeyRequest),
    responses={201: {"model": ApiKeyCreated}, **problems(400, 422)},
    summary="Create an API key (admin); the secret is shown once",
)
async def create_api_key(request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, CreateApiKeyRequest)
    created = await keys.create_api_key(
        context,
        caller,
        role=Role(body.role),
        principal_id=body.principal_id,
        groups=body.groups,
        email=body.email,
    )
    payload = {
        "id": str(created.id),
        "key": created.key,
        "role": created.role.value,
        "principal_id": created.principal_id,
    }
    return json_response(payload, 201)


@router.get(
    "/api-keys",
    tags=["api-keys"],
    response_model=None,
    responses={200: {"model": ApiKeyListOut}, **problems()},
    summary="List API keys (admin); never shows secrets",
)
async def list_api_keys(context: Context, caller: Caller) -> Response:
    rows = await keys.list_api_keys(context, caller)
    items = [
        {**row, "created_at": rfc3339(row["created_at"]), "revoked_at": rfc3339(row["revoked_at"])}
        for row in rows
    ]
    return json_response({"items": items})


@router.delete(
    "/api-keys/{key_id}",
    tags=["api-keys"],
    status_code=204,
    response_model=None,
    responses=problems(404),
    summary="Revoke an API key at once (admin)",
)
async def revoke_api_key(key_id: str, context: Context, caller: Caller) -> Response:
    try:
        parsed: uuid.UUID | None = uuid.UUID(key_id)
    except ValueError:
        parsed = None
    await keys.revoke_api_key(context, caller, parsed, shown_id=key_id)
    return Response(status_code=204)


@router.get(
    "/metrics",
    tags=["health"],
    response_model=None,
    responses={200: {"description": "Prometheus text format"}, **problems()},
    summary="Prometheus metrics (admin, supervisor)",
)
async def metrics(context: Context, caller: Caller) -> Response:
    require_role(caller, frozenset({Role.ADMIN, Role.SUPERVISOR}), "read metrics")
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
