"""Votes on tasks with an approval rule, and the admin-managed approval rules."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from signoff.api.deps import (
    Caller,
    Context,
    json_response,
    model_body_doc,
    problems,
    read_json_body,
    read_model,
)
from signoff.api.routes.evidence import RECEIPT_HEADER, RECEIPT_HEADER_DOC
from signoff.api.schemas import VotedTaskOut, VoteRequest
from signoff.domain.approval_rules import APPROVAL_RULE_SCHEMA
from signoff.domain.states import Decision
from signoff.domain.tasks import view_for
from signoff.services import evidence, votes

router = APIRouter()


@router.post(
    "/tasks/{task_id}/votes",
    tags=["approvals"],
    response_model=None,
    openapi_extra=model_body_doc(VoteRequest),
    responses={
        200: {"model": VotedTaskOut, "headers": RECEIPT_HEADER_DOC},
        **problems(400, 403, 404, 409, 413, 422),
    },
    summary="Vote on a task with an approval rule (no lease needed)",
)
async def cast_vote(task_id: str, request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, VoteRequest)
    ballot = await votes.vote(
        context,
        caller,
        task_id,
        decision=Decision(body.decision),
        notes=body.notes,
        revision=body.revision,
        digest=body.digest,
        door="api",
        operator_id=body.operator_id,
        stage=body.stage,
        subject=body.subject,
    )
    view = view_for(caller, ballot.task, context.now())
    receipt = await evidence.latest_receipt(context, ballot.task.id)
    headers = {RECEIPT_HEADER: receipt} if receipt else None
    return json_response({**view, "vote": ballot.receipt.as_json()}, headers=headers)


def _rule_doc() -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": APPROVAL_RULE_SCHEMA}},
        }
    }


@router.put(
    "/approval-rules/{name}",
    tags=["approvals"],
    response_model=None,
    openapi_extra=_rule_doc(),
    responses=problems(400, 403, 413, 422),
    summary="Create or replace a named approval rule (admin); tasks keep their copy",
)
async def put_rule(name: str, request: Request, context: Context, caller: Caller) -> Response:
    body = await read_json_body(request)
    saved, created = await votes.save_rule(context, caller, name, body)
    if not created:
        return json_response(saved)
    location = f"/approval-rules/{quote(name, safe='')}"
    return json_response(saved, 201, headers={"Location": location})


@router.get(
    "/approval-rules",
    tags=["approvals"],
    response_model=None,
    responses=problems(403),
    summary="List the named approval rules (admin)",
)
async def list_rules(context: Context, caller: Caller) -> Response:
    return json_response({"items": await votes.list_rules(context, caller)})


@router.get(
    "/approval-rules/{name}",
    tags=["approvals"],
    response_model=None,
    responses=problems(403, 404),
    summary="One named approval rule (admin)",
)
async def get_rule(name: str, context: Context, caller: Caller) -> Response:
    return json_response(await votes.get_rule(context, caller, name))


@router.delete(
    "/approval-rules/{name}",
    tags=["approvals"],
    status_code=204,
    response_model=None,
    responses=problems(403, 404),
    summary="Delete a named approval rule (admin); tasks keep their copy",
)
async def delete_rule(name: str, context: Context, caller: Caller) -> Response:
    await votes.delete_rule(context, caller, name)
    return Response(status_code=204)
