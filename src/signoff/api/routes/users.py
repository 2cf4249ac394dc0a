"""Users who sign in to the console (admin): create, list, change, disable."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.responses import Response

from signoff.api.deps import Caller, Context, json_response, model_body_doc, problems, read_model
from signoff.domain.clock import rfc3339
from signoff.domain.states import Role
from signoff.domain.users import User
from signoff.services import users

router = APIRouter(tags=["users"])

EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+$"


class CreateUserRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    principal_id: str = Field(min_length=1, max_length=255)
    role: Literal["reviewer", "supervisor", "admin"]
    groups: list[str] = Field(default_factory=list)
    email: str | None = Field(default=None, pattern=EMAIL_PATTERN, max_length=320)
    password: str | None = Field(
        default=None,
        description="Set the password now; without it a one-time set-password link "
        "(valid 24 h) is returned.",
    )


class UpdateUserRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    disabled: StrictBool | None = Field(
        default=None, description="true ends every session of the user at once."
    )
    role: Literal["reviewer", "supervisor", "admin"] | None = None
    groups: list[str] | None = None
    email: str | None = Field(default=None, pattern=EMAIL_PATTERN, max_length=320)
    notify: str | None = Field(
        default=None,
        description="How the user hears of work: `each` event as it happens, a digest "
        "every `15m`, `1h`, `4h` or `1d`, or `none` (the work is still in the console).",
    )


class UserOut(BaseModel):
    id: str
    principal_id: str
    role: str
    groups: list[str]
    email: str | None
    notify: str
    source: Literal["local", "oidc"]
    has_password: bool
    disabled: bool
    disabled_at: str | None
    created_at: str
    updated_at: str


class UserCreated(UserOut):
    set_password_link: str | None = Field(
        description="One-time link to set the password (valid 24 h); null when a password "
        "was given."
    )


class UserListOut(BaseModel):
    items: list[UserOut]


class PasswordLinkOut(BaseModel):
    set_password_link: str


def _out(user: User) -> dict[str, Any]:
    data = user.public()
    for field in ("disabled_at", "created_at", "updated_at"):
        data[field] = rfc3339(data[field])
    return data


@router.post(
    "/users",
    status_code=201,
    response_model=None,
    openapi_extra=model_body_doc(CreateUserRequest),
    responses={201: {"model": UserCreated}, **problems(409, 422)},
    summary="Create a user who signs in to the console (admin)",
)
async def create_user(request: Request, context: Context, caller: Caller) -> Response:
    body = await read_model(request, CreateUserRequest)
    created = await users.create_user(
        context,
        caller,
        principal_id=body.principal_id,
        role=Role(body.role),
        groups=body.groups,
        email=body.email,
        password=body.password,
    )
    return json_response(
        {**_out(created.user), "set_password_link": created.set_password_link}, 201
    )


@router.get(
    "/users",
    response_model=None,
    responses={200: {"model": UserListOut}, **problems()},
    summary="List users (admin); never shows passwords",
)
async def list_users(context: Context, caller: Caller) -> Response:
    found = await users.list_users(context, caller)
    return json_response({"items": [_out(user) for user in found]})


@router.patch(
    "/users/{principal_id}",
    response_model=None,
    openapi_extra=model_body_doc(UpdateUserRequest),
    responses={200: {"model": UserOut}, **problems(404, 409, 422)},
    summary="Change a user (admin); disabling ends their sessions at once",
)
async def update_user(
    principal_id: str, request: Request, context: Context, caller: Caller
) -> Response:
    body = await read_model(request, UpdateUserRequest)
    updated = await users.update_user(
        context,
        caller,
        principal_id,
        disabled=body.disabled,
        role=Role(body.role) if body.role else None,
        groups=body.groups,
        email=body.email,
        notify=body.notify,
    )
    return json_response(_out(updated))


@router.post(
    "/users/{principal_id}/disable",
    response_model=None,
    responses={200: {"model": UserOut}, **problems(404)},
    summary="Disable a user (admin): their sessions end at once",
)
async def disable_user(principal_id: str, context: Context, caller: Caller) -> Response:
    updated = await users.update_user(context, caller, principal_id, disabled=True)
    return json_response(_out(updated))


@router.post(
    "/users/{principal_id}/password-link",
    response_model=None,
    responses={200: {"model": PasswordLinkOut}, **problems(404, 409)},
    summary="A new one-time set-password link for a local user (admin)",
)
async def password_link(principal_id: str, context: Context, caller: Caller) -> Response:
    link = await users.issue_password_link(context, caller, principal_id)
    return json_response({"set_password_link": link})
