"""API keys and authentication.

A key is ``signoff_`` followed by 43 URL-safe characters (256 random bits). Only its
SHA-256 is stored; the secret is shown once, at creation. A fast hash is right here
(unlike for passwords): the secret has full entropy, so there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from signoff.domain.names import normal_name
from signoff.domain.states import Role
from signoff.domain.tasks import Principal, require_role
from signoff.errors import ErrorCode, FieldError, NotFound, Unauthenticated, validation_error
from signoff.metrics import API_KEY_CACHE, child
from signoff.services import names
from signoff.services.context import ServiceContext
from signoff.store import keys as key_store

log = structlog.get_logger("signoff.keys")

KEY_PREFIX = "signoff_"
MAX_PRINCIPAL_ID_LENGTH = 255
BOOTSTRAP_ADMIN_PRINCIPAL = "admin"


def hash_api_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_api_key_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class CreatedKey:
    id: uuid.UUID
    key: str
    role: Role
    principal_id: str


def _check_principal_id(principal_id: str) -> None:
    if not 1 <= len(principal_id) <= MAX_PRINCIPAL_ID_LENGTH or "\x00" in principal_id:
        raise validation_error(
            [
                FieldError(
                    "principal_id",
                    f"must be 1 to {MAX_PRINCIPAL_ID_LENGTH} characters without U+0000",
                )
            ]
        )


async def authenticate(ctx: ServiceContext, bearer: str | None) -> Principal:
    """The principal behind ``Authorization: Bearer <key>``.

    Verified keys are cached in the process (:mod:`signoff.store.runtime.keycache`); a revocation
    still takes effect on the next request, on every replica.

    Raises:
        Unauthenticated: 401 ``ERR_UNAUTHENTICATED`` when the key is missing, unknown or
            revoked.
    """
    if not bearer:
        raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
    key_hash = hash_api_key(bearer)
    cache = ctx.database.key_cache
    principal = cache.get(key_hash)
    if principal is not None:
        child(API_KEY_CACHE, "hit").inc()
        return principal
    child(API_KEY_CACHE, "miss").inc()
    generation = cache.generation
    async with ctx.database.transaction(write=False) as uow:
        principal = await key_store.find_principal_by_key_hash(uow.connection, key_hash)
    if principal is None:
        raise Unauthenticated("the API key is unknown or revoked")
    cache.put(key_hash, principal, generation)
    return principal


async def still_authenticated(ctx: ServiceContext, principal: Principal) -> Principal:
    """The key ``principal`` authenticated with, read again: a request that waited (a
    long-poll) answers nothing once its key was revoked meanwhile.

    Raises:
        Unauthenticated: 401 ``ERR_UNAUTHENTICATED``, the key was revoked.
    """
    async with ctx.database.transaction(write=False) as uow:
        current = await key_store.find_live_principal(uow.connection, principal.key_id)
    if current is None:
        raise Unauthenticated("the API key is unknown or revoked")
    return current


async def create_api_key(
    ctx: ServiceContext,
    caller: Principal,
    *,
    role: Role,
    principal_id: str,
    groups: list[str] | None = None,
    email: str | None = None,
) -> CreatedKey:
    """Create a key (admins only). The returned ``key`` is the only time the secret exists
    outside the caller's hands. ``principal_id`` is stored in NFKC; one that looks like
    another principal's (:mod:`signoff.domain.names`) is refused (422, ``principal_id``)."""
    require_role(caller, frozenset({Role.ADMIN}), "manage API keys")
    if role is Role.SYSTEM:
        raise validation_error([FieldError("role", "system is Signoff's own role")])
    principal_id = normal_name(principal_id)
    _check_principal_id(principal_id)
    secret = new_api_key_secret()
    key_id = uuid.uuid4()
    async with ctx.database.transaction() as uow:
        if (similar := await names.look_alike_of(uow.connection, principal_id)) is not None:
            problem = f"looks like {similar}, another principal (names are compared case-folded)"
            raise validation_error([FieldError("principal_id", problem)])
        await key_store.insert_api_key(
            uow.connection,
            key_id=key_id,
            key_hash=hash_api_key(secret),
            role=role,
            principal_id=principal_id,
            now=ctx.now(),
            groups=groups,
            email=email,
        )
        await uow.commit()
    log.info("api_key.created", key_id=str(key_id), role=role.value, principal_id=principal_id)
    return CreatedKey(id=key_id, key=secret, role=role, principal_id=principal_id)


async def revoke_api_key(
    ctx: ServiceContext, caller: Principal, key_id: uuid.UUID | None, *, shown_id: str
) -> None:
    """Revoke at once (admins only).

    Raises:
        NotFound: 404 ``ERR_API_KEY_NOT_FOUND`` for an unknown or already revoked key.
    """
    require_role(caller, frozenset({Role.ADMIN}), "manage API keys")
    async with ctx.database.transaction() as uow:
        revoked = None
        if key_id is not None:
            revoked = await key_store.revoke_api_key(uow.connection, key_id, ctx.now())
        if revoked is None:
            raise NotFound(f"no live API key {shown_id}", error_code=ErrorCode.API_KEY_NOT_FOUND)
        await uow.commit()
    cache = ctx.database.key_cache
    # Where the commit notified every process (PostgreSQL), answer once this one has heard
    # it too; with nobody to notify there is nothing to wait for.
    await cache.heard(revoked, seconds=2.0)
    cache.invalidate(revoked)
    log.info("api_key.revoked", key_id=str(key_id))


async def list_api_keys(ctx: ServiceContext, caller: Principal) -> Sequence[dict[str, Any]]:
    """Every key's id, role, principal and dates; never a secret (admins only)."""
    require_role(caller, frozenset({Role.ADMIN}), "manage API keys")
    async with ctx.database.transaction(write=False) as uow:
        return await key_store.list_api_keys(uow.connection)


async def ensure_admin_key(ctx: ServiceContext) -> str | None:
    """Make sure an admin can get in after start-up.

    With ``SIGNOFF_BOOTSTRAP_ADMIN_KEY`` set, a live admin key with exactly that secret
    exists afterwards (created, or un-revoked: the configuration is the authority).
    Otherwise, when no live admin key exists, one is generated and its secret returned
    so the CLI can print it once. Returns ``None`` when nothing new needs showing.
    """
    configured = ctx.settings.bootstrap_admin_key
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        if configured is not None:
            key_hash = hash_api_key(configured)
            if await key_store.key_hash_exists(conn, key_hash):
                await key_store.restore_bootstrap_key(conn, key_hash)
            else:
                await key_store.insert_api_key(
                    conn,
                    key_id=uuid.uuid4(),
                    key_hash=key_hash,
                    role=Role.ADMIN,
                    principal_id=BOOTSTRAP_ADMIN_PRINCIPAL,
                    now=now,
                )
            await uow.commit()
            return None
        if await key_store.any_live_admin_key(conn):
            return None
        secret = new_api_key_secret()
        await key_store.insert_api_key(
            conn,
            key_id=uuid.uuid4(),
            key_hash=hash_api_key(secret),
            role=Role.ADMIN,
            principal_id=BOOTSTRAP_ADMIN_PRINCIPAL,
            now=now,
        )
        await uow.commit()
        return secret
