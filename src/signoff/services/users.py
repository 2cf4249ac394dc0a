"""People who sign in to the console: local accounts, OpenID Connect accounts, their
passwords and set-password links (their sessions: :mod:`signoff.services.sessions`).

A user ends in the same :class:`~signoff.domain.tasks.Principal` an API key does (the
user's id plays the part of the key id), so every rule that holds for a key holds for a
user: roles, groups, no self-approval, operator identity.

Passwords are hashed with Argon2id (argon2-cffi).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from signoff.domain.names import normal_name
from signoff.domain.notify_choice import parse_notify_choice
from signoff.domain.states import Role
from signoff.domain.tasks import Principal, require_role
from signoff.domain.users import User
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    NotFound,
    validation_error,
)
from signoff.services import names
from signoff.services.context import ServiceContext
from signoff.services.passwords import MAX_PASSWORD_LENGTH as MAX_PASSWORD_LENGTH
from signoff.services.passwords import MIN_PASSWORD_LENGTH as MIN_PASSWORD_LENGTH
from signoff.services.passwords import check_password_rules as check_password_rules
from signoff.services.passwords import hash_password as hash_password
from signoff.services.passwords import hash_token as hash_token
from signoff.services.passwords import verify_password as verify_password
from signoff.store import keys as keys_store
from signoff.store import users as store

log = structlog.get_logger("signoff.users")

USER_ROLES = (Role.REVIEWER, Role.SUPERVISOR, Role.ADMIN)
"""The roles a console user may hold, from the least access to the most."""
USER_MANAGERS = frozenset({Role.ADMIN})
"""Who may add, change and disable users."""
MAX_PRINCIPAL_ID_LENGTH = 255
PASSWORD_LINK_HOURS = 24


def check_identity(principal_id: str, role: Role, groups: list[str], email: str | None) -> None:
    errors = []
    if not 1 <= len(principal_id) <= MAX_PRINCIPAL_ID_LENGTH or any(
        c.isspace() or c == "\x00" for c in principal_id
    ):
        errors.append(
            FieldError(
                "principal_id",
                f"must be 1 to {MAX_PRINCIPAL_ID_LENGTH} characters without spaces",
            )
        )
    if role not in USER_ROLES:
        errors.append(FieldError("role", "must be reviewer, supervisor or admin"))
    for index, group in enumerate(groups):
        if not group or any(c.isspace() or c in ",\x00" for c in group):
            errors.append(FieldError(f"groups[{index}]", "must be a name without spaces"))
    if email is not None and (
        "@" not in email or any(c.isspace() for c in email) or len(email) > 320
    ):
        errors.append(FieldError("email", "must be an e-mail address"))
    if errors:
        raise validation_error(errors)


def password_link(ctx: ServiceContext, token: str) -> str:
    return f"{ctx.settings.public_base_url.rstrip('/')}/console/set-password/{token}"


@dataclass(frozen=True)
class CreatedUser:
    user: User
    set_password_link: str | None
    """A one-time link (valid 24 h) when no password was given; ``None`` otherwise."""


async def create_user(
    ctx: ServiceContext,
    caller: Principal,
    *,
    principal_id: str,
    role: Role,
    groups: list[str] | None = None,
    email: str | None = None,
    password: str | None = None,
) -> CreatedUser:
    """Create a local user (admins only). Without ``password``, a one-time set-password
    link is returned (valid 24 h).

    Raises:
        Conflict: 409 ``ERR_USER_EXISTS`` / ``ERR_EMAIL_IN_USE``.
    """
    require_role(caller, USER_MANAGERS, "manage users")
    groups = list(groups or [])
    principal_id = normal_name(principal_id)
    check_identity(principal_id, role, groups, email)
    if password is not None:
        check_password_rules(password, context=[principal_id, email or ""])
    password_hash = await ctx.cpu.passwords.run(hash_password, password) if password else None
    now = ctx.now()
    token = secrets.token_urlsafe(32)
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        if await store.find_user(conn, principal_id) is not None:
            raise Conflict(f"user {principal_id} exists already", error_code=ErrorCode.USER_EXISTS)
        if (similar := await names.look_alike_of(conn, principal_id)) is not None:
            raise Conflict(f"{principal_id} looks like {similar}", error_code=ErrorCode.USER_EXISTS)
        if email and await store.email_in_use(conn, email, other_than=None):
            raise Conflict(
                f"another user has the e-mail address {email}", error_code=ErrorCode.EMAIL_IN_USE
            )
        try:
            user = await store.insert_user(
                conn,
                user_id=uuid.uuid4(),
                principal_id=principal_id,
                role=role,
                groups=groups,
                email=email,
                password_hash=password_hash,
                source="local",
                now=now,
            )
        except store.UserExists:  # created by a concurrent request since the checks above
            raise Conflict(
                f"user {principal_id} (or one with that e-mail address) was just created",
                error_code=ErrorCode.USER_EXISTS,
            ) from None
        if password_hash is None:
            await store.insert_password_token(
                conn,
                token_hash=hash_token(token),
                user_id=user.id,
                expires_at=now + timedelta(hours=PASSWORD_LINK_HOURS),
                now=now,
            )
        await uow.commit()
    log.info(
        "user.created",
        principal_id=principal_id,
        role=role.value,
        by=caller.principal_id,
        with_password=password_hash is not None,
    )
    return CreatedUser(user, None if password_hash else password_link(ctx, token))


async def issue_password_link(ctx: ServiceContext, caller: Principal, principal_id: str) -> str:
    """A new one-time set-password link for a local user (admins only); earlier unused
    links stop working."""
    require_role(caller, USER_MANAGERS, "manage users")
    now = ctx.now()
    token = secrets.token_urlsafe(32)
    async with ctx.database.transaction() as uow:
        user = await _existing(uow.connection, principal_id)
        if user.source != "local":
            raise Conflict(
                f"{principal_id} signs in through single sign-on and has no password here",
                error_code=ErrorCode.STATE_CONFLICT,
            )
        await store.retire_password_tokens(uow.connection, user.id, now)
        await store.insert_password_token(
            uow.connection,
            token_hash=hash_token(token),
            user_id=user.id,
            expires_at=now + timedelta(hours=PASSWORD_LINK_HOURS),
            now=now,
        )
        await uow.commit()
    log.info("user.password_link", principal_id=principal_id, by=caller.principal_id)
    return password_link(ctx, token)


async def _existing(conn: Any, principal_id: str) -> User:
    user = await store.find_user(conn, principal_id)
    if user is None:
        raise NotFound(f"no user {principal_id}", error_code=ErrorCode.USER_NOT_FOUND)
    return user


async def list_users(ctx: ServiceContext, caller: Principal) -> list[User]:
    require_role(caller, USER_MANAGERS, "manage users")
    async with ctx.database.transaction(write=False) as uow:
        return await store.list_users(uow.connection)


async def get_user(ctx: ServiceContext, caller: Principal, principal_id: str) -> User:
    """One user (admins only).

    Raises:
        NotFound: 404 ``ERR_USER_NOT_FOUND``.
    """
    require_role(caller, USER_MANAGERS, "manage users")
    async with ctx.database.transaction(write=False) as uow:
        return await _existing(uow.connection, principal_id)


async def update_user(
    ctx: ServiceContext,
    caller: Principal,
    principal_id: str,
    *,
    disabled: bool | None = None,
    role: Role | None = None,
    groups: list[str] | None = None,
    email: str | None = None,
    notify: str | None = None,
) -> User:
    """Change a user (admins only). Disabling ends every session of the user at once;
    changing the role or groups applies from the user's next request."""
    require_role(caller, USER_MANAGERS, "manage users")
    now = ctx.now()
    if notify is not None:
        notify = parse_notify_choice(notify)
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        user = await _existing(conn, principal_id)
        check_identity(
            principal_id,
            role or user.role,
            list(groups if groups is not None else user.groups),
            email if email is not None else user.email,
        )
        values: dict[str, Any] = {"updated_at": now}
        if role is not None:
            values["role"] = role.value
        if groups is not None:
            values["groups"] = groups
        if notify is not None:
            values["notify"] = notify
        if email is not None:
            if await store.email_in_use(conn, email, other_than=principal_id):
                raise Conflict(
                    f"another user has the e-mail address {email}",
                    error_code=ErrorCode.EMAIL_IN_USE,
                )
            values["email"] = email
        if disabled is True and user.disabled_at is None:
            values["disabled_at"] = now
        elif disabled is False:
            values["disabled_at"] = None
        updated = await store.update_user(conn, user.id, **values)
        ended = 0
        if disabled:
            ended = await store.delete_user_sessions(conn, user.id)
            await store.retire_password_tokens(conn, user.id, now)
        await uow.commit()
    log.info(
        "user.updated",
        principal_id=principal_id,
        by=caller.principal_id,
        changed=sorted(k for k in values if k != "updated_at"),
        sessions_ended=ended,
    )
    return updated


async def set_own_notify_choice(ctx: ServiceContext, caller: Principal, notify: str) -> User:
    """A signed-in person chooses how they hear of work (any role, their own account).

    Raises:
        Unprocessable: ``ERR_VALIDATION`` on ``notify`` for a value not offered.
        NotFound: ``ERR_USER_NOT_FOUND`` when the caller has no console account.
    """
    choice = parse_notify_choice(notify)
    async with ctx.database.transaction() as uow:
        user = await _existing(uow.connection, caller.principal_id)
        updated = await store.update_user(
            uow.connection, user.id, notify=choice, updated_at=ctx.now()
        )
        await uow.commit()
    log.info("user.notify_chosen", principal_id=caller.principal_id, notify=choice)
    return updated


async def link_sso(
    ctx: ServiceContext, caller: Principal, principal_id: str, *, issuer: str, subject: str
) -> User:
    """Let the identity provider's account ``(issuer, subject)`` sign in as ``principal_id``
    (admins only): a local user keeps its password too; an API key's principal gets a
    user (its role and groups come from the provider at each sign-in).

    Raises:
        NotFound: 404 ``ERR_USER_NOT_FOUND`` when no user or API key has that principal.
        Conflict: 409 ``ERR_USER_EXISTS`` when the identity is linked to someone else.
    """
    require_role(caller, USER_MANAGERS, "manage users")
    if not issuer.strip() or not subject.strip():
        raise validation_error([FieldError("subject", "issuer and subject must not be empty")])
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        linked = await store.find_user_by_identity(conn, issuer, subject)
        user = await store.find_user(conn, principal_id)
        if linked is not None and (user is None or linked.id != user.id):
            raise Conflict(
                f"that identity signs in as {linked.principal_id} already",
                error_code=ErrorCode.USER_EXISTS,
            )
        if user is not None:
            user = await store.update_user(
                conn, user.id, oidc_issuer=issuer, oidc_subject=subject, updated_at=now
            )
        elif await keys_store.principal_has_keys(conn, principal_id):
            user = await store.insert_user(
                conn,
                user_id=uuid.uuid4(),
                principal_id=principal_id,
                role=Role.REVIEWER,
                groups=[],
                email=None,
                password_hash=None,
                source="oidc",
                now=now,
                oidc_issuer=issuer,
                oidc_subject=subject,
            )
        else:
            raise NotFound(
                f"no user or API key has the principal {principal_id}",
                error_code=ErrorCode.USER_NOT_FOUND,
            )
        await uow.commit()
    log.info("user.sso_linked", principal_id=principal_id, issuer=issuer, by=caller.principal_id)
    return user


# Set-password links -------------------------------------------------------------------


async def check_password_token(ctx: ServiceContext, token: str) -> User:
    """The user a set-password link is for.

    Raises:
        NotFound: 404 ``ERR_LINK_INVALID`` for an unknown, used or expired link.
    """
    async with ctx.database.transaction(write=False) as uow:
        return await _link_user(uow.connection, token, ctx.now())


async def _link_user(conn: Any, token: str, now: datetime) -> User:
    row = await store.find_password_token(conn, hash_token(token))
    user = await store.find_user_by_id(conn, row.user_id) if row is not None else None
    if row is None or user is None:
        raise NotFound(
            "this set-password link is not valid; ask an administrator for a new one",
            error_code=ErrorCode.LINK_INVALID,
        )
    if row.used_at is not None:
        raise NotFound(
            "this set-password link was used already; sign in, or ask an administrator "
            "for a new link",
            error_code=ErrorCode.LINK_INVALID,
        )
    if row.expires_at <= now or user.disabled_at is not None:
        raise NotFound(
            "this set-password link has expired (links are valid for 24 hours); ask an "
            "administrator for a new one",
            error_code=ErrorCode.LINK_INVALID,
        )
    return user


async def set_password_with_token(ctx: ServiceContext, token: str, password: str) -> User:
    """Set the password a one-time link is for; the link then stops working, and every
    existing session of the user ends."""
    user = await check_password_token(ctx, token)
    check_password_rules(password, context=[user.principal_id, user.email or ""])
    password_hash = await ctx.cpu.passwords.run(hash_password, password)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        user = await _link_user(conn, token, now)
        if not await store.use_password_token(conn, hash_token(token), now):
            raise NotFound(
                "this set-password link was used already", error_code=ErrorCode.LINK_INVALID
            )
        await store.retire_password_tokens(conn, user.id, now)
        updated = await store.update_user(
            conn, user.id, password_hash=password_hash, updated_at=now
        )
        await store.delete_user_sessions(conn, user.id)
        await uow.commit()
    log.info("user.password_set", principal_id=user.principal_id)
    return updated


async def set_password(
    ctx: ServiceContext, caller: Principal, principal_id: str, password: str
) -> User:
    """Set a local user's password directly (admins only: ``create-user --password-stdin``)."""
    require_role(caller, USER_MANAGERS, "manage users")
    async with ctx.database.transaction(write=False) as uow:
        user = await _existing(uow.connection, principal_id)
    check_password_rules(password, context=[principal_id, user.email or ""])
    password_hash = await ctx.cpu.passwords.run(hash_password, password)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        user = await _existing(uow.connection, principal_id)
        updated = await store.update_user(
            uow.connection, user.id, password_hash=password_hash, updated_at=now
        )
        await store.retire_password_tokens(uow.connection, user.id, now)
        await store.delete_user_sessions(uow.connection, user.id)
        await uow.commit()
    return updated


def may_manage_users(principal: Principal) -> bool:
    return principal.role in USER_MANAGERS


def principal_of(user: User) -> Principal:
    return user.principal
