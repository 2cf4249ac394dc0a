"""Supervisors and admins stepping in on a task: force release, reassign, cancel."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from signoff.api.deps import Caller, Context, json_response, model_body_doc, problems, read_model
from signoff.api.schemas import TaskOut
from signoff.domain.tasks import task_view
from signoff.services import supervision

router = APIRouter(prefix="/tasks", tags=["supervision"])


class ForceReleaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    holder: str | None = Field(
        default=None,
        description="Release only if this principal still holds the lease (409 otherwise).",
    )


class ReassignRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: str = Field(min_length=1, max_length=100, description="The group to hand it to.")


@router.post(
    "/{task_id}/force-release",
    response_model=None,
    openapi_extra=model_body_doc(ForceReleaseRequest, required=False),
    responses={200: {"model": TaskOut}, **problems(400, 404, 409, 413, 422)},
    summary="End the lease on a claimed task, whoever holds it (supervisor, admin)",
)
async def force_release(
    task_id: str, request: Request, context: Context, caller: Caller
) -> Response:
    body = await read_model(request, ForceReleaseRequest, optional=True)
    task = await supervision.force_release(context, caller, task_id, holder=body.holder)
    return json_response(task_view(task, context.now()))


@router.post(
    "/{task_id}/reassign",
    response_model=None,
    openapi_extra=model_body_doc(ReassignRequest),
    responses={200: {"model": TaskOut}, **problems(400, 404, 409, 413, 422)},
    summary="Hand a waiting or claimed task to a group (supervisor, admin)",
)
async def reassign(task_id: str, request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, ReassignRequest)
    task = await supervision.reassign(context, caller, task_id, body.group)
    return json_response(task_view(task, context.now()))
