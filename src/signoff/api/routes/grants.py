"""Remembered approvals: an admin's grants, the list, and revocation (the reviewer who
made one with an approval may revoke it too)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from signoff.api.deps import (
    Caller,
    Context,
    json_response,
    model_body_doc,
    problems,
    read_json_body,
)
from signoff.api.feedback_schemas import GrantIn, GrantListOut, GrantOut
from signoff.services import grants

router = APIRouter()


@router.post(
    "/approval-grants",
    tags=["approvals"],
    response_model=None,
    openapi_extra=model_body_doc(GrantIn),
    responses={201: {"model": GrantOut}, **problems(400, 413, 422)},
    summary="Create a remembered approval as a policy (admin)",
)
async def create_grant(request: Request, context: Context, caller: Caller) -> Response:
    body = await read_json_body(request)
    grant = await grants.create(context, caller, body)
    location = f"/approval-grants/{grant.id}"
    return json_response(grant.public(context.now()), 201, headers={"Location": location})


@router.get(
    "/approval-grants",
    tags=["approvals"],
    response_model=None,
    responses={200: {"model": GrantListOut}, **problems()},
    summary="List remembered approvals, newest first (admins and supervisors)",
)
async def list_grants(context: Context, caller: Caller) -> Response:
    now = context.now()
    return json_response({"items": [g.public(now) for g in await grants.listed(context, caller)]})


@router.delete(
    "/approval-grants/{grant_id}",
    tags=["approvals"],
    response_model=None,
    responses={200: {"model": GrantOut}, **problems(404)},
    summary="Revoke a remembered approval (admins, supervisors, the reviewer who made it)",
)
async def revoke_grant(grant_id: str, context: Context, caller: Caller) -> Response:
    grant = await grants.revoke(context, caller, grant_id)
    return json_response(grant.public(context.now()))
