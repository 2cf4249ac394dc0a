"""Review task endpoints: escalate, claim, renew, release, resolve, read."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from signoff.api.deps import (
    LEASE_TOKEN_PARAMETER,
    Caller,
    Context,
    LeaseTokenHeader,
    body_doc,
    json_response,
    model_body_doc,
    problems,
    read_json_body,
    read_model,
    require_lease_token,
)
from signoff.api.routes.evidence import RECEIPT_HEADER, RECEIPT_HEADER_DOC
from signoff.api.schemas import (
    AuditTrailOut,
    ClaimNextRequest,
    ClaimRequest,
    EscalationCreated,
    LeaseGranted,
    ResolveRequest,
    TaskOut,
    TaskPageOut,
    TaskWithViewOut,
)
from signoff.domain.producer import escalation_schema
from signoff.domain.states import Decision, ExecutionStatus, TaskStatus
from signoff.domain.tasks import Principal, view_for
from signoff.errors import FieldError, validation_error
from signoff.services import common, evidence, longpoll, revisions
from signoff.services import tasks as task_service
from signoff.services.tasks import LeaseGrant

router = APIRouter(prefix="/tasks", tags=["tasks"])

TRACEPARENT_PARAMETER = {
    "name": "traceparent",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "W3C Trace Context; kept with the task and sent on its webhook deliveries "
    "(an invalid value is ignored).",
}


def _grant(context: Context, caller: Principal, grant: LeaseGrant) -> Response:
    view = view_for(caller, grant.task, context.now())
    return json_response({**view, "lease_token": grant.lease_token})


@router.post(
    "/escalate",
    status_code=201,
    response_model=None,
    openapi_extra={
        **body_doc(escalation_schema()),
        "parameters": [TRACEPARENT_PARAMETER],
    },
    responses={201: {"model": EscalationCreated}, **problems(400, 409, 413, 422)},
    summary="Escalate work to human review",
)
async def escalate(request: Request, context: Context, caller: Caller) -> Response:
    """Create a review task. Replays the first response (with ``Idempotent-Replayed:
    true``) for the same idempotency key and body within ``SIGNOFF_IDEMPOTENCY_TTL_SECONDS``.
    A valid W3C ``traceparent`` header is kept with the task and sent on its webhooks."""
    body = await read_json_body(request)
    traceparent = request.headers.get("traceparent")
    outcome = await task_service.escalate(context, caller, body, traceparent=traceparent)
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
    if outcome.status_code == 201:
        task_id = outcome.task_id or json.loads(outcome.body)["id"]  # a shield replay: read it
        headers["Location"] = f"/tasks/{task_id}"
    return json_response(outcome.body, outcome.status_code, headers)


@router.post(
    "/claim-next",
    response_model=None,
    openapi_extra=model_body_doc(ClaimNextRequest, required=False),
    responses={
        200: {"model": LeaseGranted},
        204: {"description": "No claimable task"},
        **problems(400, 413, 422),
    },
    summary="Claim the oldest claimable task",
)
async def claim_next(request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, ClaimNextRequest, optional=True)
    grant = await task_service.claim_next(
        context,
        caller,
        entity_type=body.entity_type,
        reason_code=body.reason_code,
        operator_id=body.operator_id,
    )
    return Response(status_code=204) if grant is None else _grant(context, caller, grant)


@router.post(
    "/{task_id}/claim",
    response_model=None,
    openapi_extra=model_body_doc(ClaimRequest, required=False),
    responses={200: {"model": LeaseGranted}, **problems(400, 404, 409, 413, 422)},
    summary="Claim one task under a new lease",
)
async def claim(task_id: str, request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, ClaimRequest, optional=True)
    return _grant(
        context,
        caller,
        await task_service.claim(context, caller, task_id, operator_id=body.operator_id),
    )


@router.post(
    "/{task_id}/lease/renew",
    response_model=None,
    responses={200: {"model": TaskOut}, **problems(400, 404, 409)},
    summary="Extend the caller's lease",
    openapi_extra={"parameters": [LEASE_TOKEN_PARAMETER]},
)
async def renew(
    task_id: str, context: Context, caller: Caller, x_lease_token: LeaseTokenHeader = None
) -> Response:
    task = await task_service.renew(context, caller, task_id, require_lease_token(x_lease_token))
    return json_response(view_for(caller, task, context.now()))


@router.post(
    "/{task_id}/release",
    response_model=None,
    responses={200: {"model": TaskOut}, **problems(400, 404, 409)},
    summary="Give the task back to the queue",
    openapi_extra={"parameters": [LEASE_TOKEN_PARAMETER]},
)
async def release(
    task_id: str, context: Context, caller: Caller, x_lease_token: LeaseTokenHeader = None
) -> Response:
    task = await task_service.release(context, caller, task_id, require_lease_token(x_lease_token))
    return json_response(view_for(caller, task, context.now()))


@router.post(
    "/{task_id}/resolve",
    response_model=None,
    openapi_extra={**model_body_doc(ResolveRequest), "parameters": [LEASE_TOKEN_PARAMETER]},
    responses={
        200: {"model": TaskOut, "headers": RECEIPT_HEADER_DOC},
        **problems(400, 404, 409, 413, 422),
    },
    summary="Record the decision under a live lease",
)
async def resolve(
    task_id: str,
    request: Request,
    context: Context,
    caller: Caller,
    x_lease_token: LeaseTokenHeader = None,
) -> Response:
    token = require_lease_token(x_lease_token)
    body = await read_model(request, ResolveRequest)
    task = await task_service.resolve(
        context,
        caller,
        task_id,
        token,
        decision=Decision(body.decision),
        notes=body.notes,
        resolution_payload=body.resolution_payload,
        operator_id=body.operator_id,
        revision=body.revision,
        digest=body.digest,
        fields=[f.model_dump() for f in body.fields] if body.fields else None,
        subject=body.subject,
        remember_seconds=body.remember_seconds,
        door="api",
    )
    receipt = await evidence.latest_receipt(context, task.id)
    headers = {RECEIPT_HEADER: receipt} if receipt else None
    return json_response(view_for(caller, task, context.now()), headers=headers)


@router.get(
    "",
    response_model=None,
    responses={200: {"model": TaskPageOut}, **problems(422)},
    summary="List tasks (cursor pagination, oldest first)",
)
async def list_tasks(
    context: Context,
    caller: Caller,
    status: TaskStatus | None = None,
    entity_type: str | None = None,
    entity_id: str | None = None,
    reason_code: str | None = None,
    execution_status: ExecutionStatus | None = None,
    claimed_by: Annotated[
        str | None, Query(description="A live claim's holder; `me` for the caller.")
    ] = None,
    assigned_group: str | None = None,
    awaiting_my_vote: Annotated[
        bool,
        Query(
            description=(
                "Only tasks decided by an approval rule, still open, on which the caller "
                "may vote now at the stage being voted on and has not voted on the "
                "current revision."
            )
        ),
    ] = False,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=task_service.MAX_PAGE_SIZE)] = 50,
) -> Response:
    page = await task_service.list_tasks(
        context,
        caller,
        limit=limit,
        cursor=cursor,
        status=status,
        entity_type=entity_type,
        entity_id=entity_id,
        reason_code=reason_code,
        execution_status=execution_status,
        claimed_by=claimed_by,
        assigned_group=assigned_group,
        awaiting_my_vote=awaiting_my_vote,
    )
    now = context.now()
    return json_response(
        {"items": [view_for(caller, t, now) for t in page.tasks], "next_cursor": page.next_cursor}
    )


@router.get(
    "/{task_id}",
    response_model=None,
    responses={200: {"model": TaskWithViewOut}, **problems(404, 422)},
    summary="One task (optionally waiting for it to change: long-poll)",
)
async def get_task(
    task_id: str,
    context: Context,
    caller: Caller,
    wait: Annotated[
        float | None,
        Query(
            gt=0,
            le=longpoll.MAX_WAIT_SECONDS,
            description="Long-poll: answer as soon as the task's version exceeds "
            "after_version, or after this many seconds with the task unchanged.",
        ),
    ] = None,
    after_version: Annotated[
        int | None,
        Query(
            ge=0,
            le=2**31 - 1,
            description="With wait: the version you have seen (default: the current one).",
        ),
    ] = None,
) -> Response:
    """With a subject: ``ETag: "<revision>"`` (use it as ``If-Match`` to revise), and for
    reviewers ``last_viewed_revision``, the revision they had seen before.

    With ``wait``: a long-poll that holds no database connection while it waits; the
    answer is 200 with the task, changed or not (compare ``version``), also when the
    server stops meanwhile; 401 when the key was revoked while it waited. One key may park
    ``SIGNOFF_MAX_LONG_POLLS_PER_KEY`` at once (beyond: 429 ``ERR_TOO_MANY_WAITS`` with
    ``Retry-After``)."""
    if wait is None:
        if after_version is not None:
            raise validation_error([FieldError("after_version", "needs wait")])
        task = await common.get_task(context, caller, task_id)
    else:
        task = await longpoll.wait_for_task(
            context, caller, task_id, wait=wait, after_version=after_version
        )
    body = view_for(caller, task, context.now())
    if not task.has_subject:
        return json_response(body)
    body["last_viewed_revision"] = await revisions.note_view(context, caller, task)
    return json_response(body, headers={"ETag": f'"{task.current_revision}"'})


@router.get(
    "/{task_id}/events",
    response_model=None,
    responses={200: {"model": AuditTrailOut}, **problems(404)},
    summary="The task's append-only audit trail",
)
async def task_events(task_id: str, context: Context, caller: Caller) -> Response:
    return json_response(
        {"items": list(await task_service.task_audit_trail(context, caller, task_id))}
    )
