"""Subjects, revisions, diffs and the execution gate."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from starlette.responses import Response

from signoff.api.deps import (
    EXECUTION_TOKEN_PARAMETER,
    Caller,
    Context,
    ExecutionTokenHeader,
    json_response,
    model_body_doc,
    problems,
    read_json_body,
    read_model,
    require_execution_token,
    required_header,
)
from signoff.api.schemas import (
    MAX_REVISION,
    ActionResultRequest,
    DiffOut,
    ExecuteRequest,
    ExecutionGrantOut,
    ExecutionLeaseOut,
    ExecutionOut,
    ReviseSubjectRequest,
    RevisionListOut,
    RevisionOut,
    TaskOut,
)
from signoff.domain.clock import rfc3339
from signoff.domain.tasks import view_for
from signoff.services import execution, revisions

router = APIRouter(prefix="/tasks", tags=["approvals"])


def _revision(row: dict[str, Any]) -> dict[str, Any]:
    shown = {k: v for k, v in row.items() if k != "task_id"}
    return shown | {"created_at": rfc3339(row["created_at"])}


@router.put(
    "/{task_id}/subject",
    response_model=None,
    openapi_extra={
        **model_body_doc(ReviseSubjectRequest),
        "parameters": [
            required_header(
                "If-Match", '"<revision>" from the ETag (428 when missing, 412 when stale).'
            )
        ],
    },
    responses={200: {"model": TaskOut}, **problems(400, 404, 409, 412, 413, 422, 428)},
    summary="Store a new revision of the subject (producer; If-Match required)",
)
async def revise_subject(
    task_id: str,
    request: Request,
    context: Context,
    caller: Caller,
    if_match: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    body = await read_json_body(request)
    task = await revisions.revise_subject(context, caller, task_id, if_match=if_match, body=body)
    return json_response(
        view_for(caller, task, context.now()), headers={"ETag": f'"{task.current_revision}"'}
    )


@router.get(
    "/{task_id}/revisions",
    response_model=None,
    responses={200: {"model": RevisionListOut}, **problems(404)},
    summary="The subject's revisions, oldest first",
)
async def list_revisions(task_id: str, context: Context, caller: Caller) -> Response:
    rows = await revisions.list_revisions(context, caller, task_id)
    return json_response({"items": [_revision(r) for r in rows]})


@router.get(
    "/{task_id}/revisions/{revision}",
    response_model=None,
    responses={200: {"model": RevisionOut}, **problems(404)},
    summary="One revision of the subject",
)
async def get_revision(
    task_id: str,
    revision: Annotated[int, Path(ge=1, le=MAX_REVISION)],
    context: Context,
    caller: Caller,
) -> Response:
    row = await revisions.get_revision(context, caller, task_id, revision)
    return json_response(_revision(row), headers={"ETag": f'"{row["revision"]}"'})


@router.get(
    "/{task_id}/diff",
    response_model=None,
    responses={200: {"model": DiffOut}, **problems(404, 422)},
    summary="Structured diff between two revisions",
)
async def diff(
    task_id: str,
    context: Context,
    caller: Caller,
    start: Annotated[int, Query(alias="from", ge=1, le=MAX_REVISION)],
    end: Annotated[int, Query(alias="to", ge=1, le=MAX_REVISION)],
) -> Response:
    return json_response(await revisions.diff(context, caller, task_id, start, end))


@router.post(
    "/{task_id}/execute",
    response_model=None,
    openapi_extra=model_body_doc(ExecuteRequest),
    responses={200: {"model": ExecutionGrantOut}, **problems(400, 404, 409, 413, 422)},
    summary="The execution gate: one atomic check, one winner (producer)",
)
async def execute(task_id: str, request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, ExecuteRequest)
    grant = await execution.execute(
        context,
        caller,
        task_id,
        revision=body.revision,
        digest=body.digest,
        operation_id=body.operation_id,
    )
    return json_response(execution.grant_view(grant))


async def _finish(
    task_id: str,
    action_id: str,
    request: Request,
    context: Context,
    caller: Caller,
    x_execution_token: str | None,
    *,
    ok: bool,
) -> Response:
    token = require_execution_token(x_execution_token)
    body = await read_model(request, ActionResultRequest)
    view = await execution.finish_action(
        context,
        caller,
        task_id,
        action_id,
        succeeded=ok,
        operation_id=body.operation_id,
        result=body.result,
        execution_token=token,
    )
    return json_response(view)


@router.post(
    "/{task_id}/execution/renew",
    response_model=None,
    responses={200: {"model": ExecutionLeaseOut}, **problems(400, 404, 409)},
    summary="Extend the execution lease (producer; X-Execution-Token)",
    openapi_extra={"parameters": [EXECUTION_TOKEN_PARAMETER]},
)
async def renew_execution(
    task_id: str, context: Context, caller: Caller, x_execution_token: ExecutionTokenHeader = None
) -> Response:
    token = require_execution_token(x_execution_token)
    task = await execution.renew_execution(context, caller, task_id, token)
    return json_response(execution.execution_lease_view(task))


@router.post(
    "/{task_id}/actions/{action_id}/complete",
    response_model=None,
    openapi_extra={
        **model_body_doc(ActionResultRequest),
        "parameters": [EXECUTION_TOKEN_PARAMETER],
    },
    responses={200: {"model": ExecutionOut}, **problems(400, 404, 409, 413, 422)},
    summary="Report an action done under the execution lease (idempotent by operation_id)",
)
async def complete_action(
    task_id: str,
    action_id: str,
    request: Request,
    context: Context,
    caller: Caller,
    x_execution_token: ExecutionTokenHeader = None,
) -> Response:
    return await _finish(task_id, action_id, request, context, caller, x_execution_token, ok=True)


@router.post(
    "/{task_id}/actions/{action_id}/fail",
    response_model=None,
    openapi_extra={
        **model_body_doc(ActionResultRequest),
        "parameters": [EXECUTION_TOKEN_PARAMETER],
    },
    responses={200: {"model": ExecutionOut}, **problems(400, 404, 409, 413, 422)},
    summary="Report an action failed under the execution lease; it may be retried alone",
)
async def fail_action(
    task_id: str,
    action_id: str,
    request: Request,
    context: Context,
    caller: Caller,
    x_execution_token: ExecutionTokenHeader = None,
) -> Response:
    return await _finish(task_id, action_id, request, context, caller, x_execution_token, ok=False)


@router.post(
    "/{task_id}/sources/{source_id}/revoke",
    response_model=None,
    responses={200: {"description": "Revoked"}, **problems(404)},
    summary="Revoke a source; approvals relying on it can no longer execute (producer)",
)
async def revoke_source(task_id: str, source_id: str, context: Context, caller: Caller) -> Response:
    return json_response(await revisions.revoke_source(context, caller, task_id, source_id))
