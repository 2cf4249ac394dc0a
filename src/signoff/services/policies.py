"""Escalation policies: the steps a waiting task goes through when nobody decides in
time (remind, reassign, expire), managed by admins. A task keeps the levels it was
escalated with, so changing or deleting a policy never strands a waiting task."""

from __future__ import annotations

from typing import Any

from signoff.domain.policies import POLICY_NAME, Policy, parse_policy, policy_from_json
from signoff.domain.states import Role
from signoff.domain.tasks import Principal, require_role
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    NotFound,
    Unprocessable,
    validation_error,
)
from signoff.services.context import ServiceContext
from signoff.store import waiting as store
from signoff.store.runtime.database import UnitOfWork

ADMIN = frozenset({Role.ADMIN})


async def policy_for(uow: UnitOfWork, ctx: ServiceContext, name: str | None) -> Policy:
    """The named policy, or the default from settings.

    Raises:
        Unprocessable: ``ERR_UNKNOWN_POLICY``.
    """
    if name is None:
        return ctx.settings.default_policy
    row = await store.find_policy(uow.connection, name)
    if row is None:
        if name == ctx.settings.default_policy.name:
            return ctx.settings.default_policy
        raise Unprocessable(
            f"no escalation policy named {name!r}",
            error_code=ErrorCode.UNKNOWN_POLICY,
            errors=[FieldError("policy", "no such policy")],
        )
    return policy_from_json(row)


async def save_policy(
    ctx: ServiceContext, caller: Principal, body: Any, *, create: bool, name: str | None = None
) -> dict[str, Any]:
    """Create (``create``) or replace a policy (admins). Tasks keep the levels they were
    escalated with, so changing or deleting a policy never strands a waiting task."""
    require_role(caller, ADMIN, "manage escalation policies")
    if not isinstance(body, dict):
        raise validation_error([FieldError("(root)", "must be an object")])
    unknown = sorted(set(body) - {"name", "levels", "headline"})
    if unknown:
        raise validation_error([FieldError(key, "is not allowed") for key in unknown])
    policy = parse_policy(body.get("name", name), body.get("levels"), body.get("headline"))
    if name is not None and policy.name != name:
        raise validation_error([FieldError("name", "must match the path")])
    if policy.name == ctx.settings.default_policy.name:
        raise validation_error(
            [
                FieldError(
                    "name", "is the settings' default policy (SIGNOFF_DEFAULT_ESCALATION_POLICY)"
                )
            ]
        )
    document = policy.as_json()
    async with ctx.database.transaction() as uow:
        if not await store.upsert_policy(
            uow.connection,
            name=policy.name,
            levels=document["levels"],
            headline=policy.headline,
            now=ctx.now(),
            create=create,
        ):
            if create:
                raise Conflict(f"policy {policy.name!r} exists", error_code=ErrorCode.POLICY_EXISTS)
            raise NotFound(f"no policy {policy.name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
        await uow.commit()
    return document


async def list_policies(ctx: ServiceContext, caller: Principal) -> list[dict[str, Any]]:
    require_role(caller, ADMIN, "manage escalation policies")
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.list_policies(uow.connection)
    return [ctx.settings.default_policy.as_json() | {"default": True}] + [
        policy_from_json(r).as_json() for r in rows if r["name"] != ctx.settings.default_policy.name
    ]


async def get_policy(ctx: ServiceContext, caller: Principal, name: str) -> dict[str, Any]:
    """One policy (the default from settings under its own name).

    Raises:
        NotFound: ``ERR_POLICY_NOT_FOUND``.
    """
    require_role(caller, ADMIN, "manage escalation policies")
    if name == ctx.settings.default_policy.name:
        return ctx.settings.default_policy.as_json()
    if not POLICY_NAME.match(name):
        raise NotFound(f"no policy {name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
    async with ctx.database.transaction(write=False) as uow:
        row = await store.find_policy(uow.connection, name)
    if row is None:
        raise NotFound(f"no policy {name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
    return policy_from_json(row).as_json()


async def delete_policy(ctx: ServiceContext, caller: Principal, name: str) -> None:
    require_role(caller, ADMIN, "manage escalation policies")
    async with ctx.database.transaction() as uow:
        if not POLICY_NAME.match(name) or not await store.delete_policy(uow.connection, name):
            raise NotFound(f"no policy {name!r}", error_code=ErrorCode.POLICY_NOT_FOUND)
        await uow.commit()
