"""Console sessions: signing in with a password or through the identity provider,
resuming a session from its cookie, signing out.

Sessions are server-side rows: the browser holds a random id (only its SHA-256 is
stored), so signing out, disabling a user or an idle/absolute lifetime ending takes
effect on the very next request. Sign-in attempts are counted per account from one
address and per address, before the password is checked (one conditional write per
scope, so concurrent attempts cannot all pass); past the limit sign-in is refused (429)
until the window has passed, whatever the password. A right password clears its
account-and-address count and is not counted against the address.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from signoff.domain.names import normal_name
from signoff.domain.states import Role
from signoff.domain.users import User
from signoff.errors import ErrorCode, Forbidden, TooManyRequests, Unauthenticated, Unprocessable
from signoff.services import names
from signoff.services.context import ServiceContext
from signoff.services.users import check_identity, hash_token, verify_password
from signoff.store import keys as keys_store
from signoff.store import users as store

log = structlog.get_logger("signoff.users")

SESSION_TOUCH_SECONDS = 60
"""A session's last-seen time is written at most this often (idle lifetime granularity)."""


@dataclass(frozen=True)
class SignedInSession:
    """A live console session: the id for the cookie (never stored), and its user."""

    session_id: str
    user: User


@dataclass(frozen=True)
class _Scope:
    key: str
    limit: int
    what: str
    failures_only: bool
    """Only failures count here: a right password gives its attempt back (the address
    scope); otherwise a right password clears the scope (an account from one address)."""


def _scopes(ctx: ServiceContext, account: str, address: str | None) -> list[_Scope]:
    """An account from one address, and the address over every account. An account alone
    is never throttled: strangers elsewhere cannot keep its owner out."""
    account = account.strip().lower()
    if address is None:  # not over HTTP (a command, a test): the account alone
        return [
            _Scope(f"account:{account}", ctx.settings.login_max_failures, "this account", False)
        ]
    return [
        _Scope(
            f"account:{account}|address:{address}",
            ctx.settings.login_max_failures,
            "this account from your address",
            False,
        ),
        _Scope(
            f"address:{address}",
            ctx.settings.login_max_failures_per_address,
            "your address",
            True,
        ),
    ]


async def _reserve(ctx: ServiceContext, conn: Any, scopes: list[_Scope], now: datetime) -> None:
    """Count this attempt in every scope before its password is checked, or refuse it."""
    window = timedelta(seconds=ctx.settings.login_failure_window_seconds)
    for scope in scopes:
        started = await store.reserve_attempt(
            conn, scope.key, limit=scope.limit, now=now, window_start=now - window
        )
        if started is not None:
            retry_at = started + window
            wait = max(1, int((retry_at - now).total_seconds()) + 1)
            raise TooManyRequests(
                f"too many failed sign-ins for {scope.what}; try again in "
                f"{_minutes(wait)} (at {retry_at.strftime('%H:%M')} UTC)",
                error_code=ErrorCode.TOO_MANY_ATTEMPTS,
                extra={"retry_after": wait},
            )


def _minutes(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} seconds"
    minutes = (seconds + 59) // 60
    return "1 minute" if minutes == 1 else f"{minutes} minutes"


async def sign_in(
    ctx: ServiceContext, username: str, password: str, *, address: str | None
) -> SignedInSession:
    """Check a local password and open a session.

    Raises:
        TooManyRequests: 429 ``ERR_TOO_MANY_ATTEMPTS`` past the failure limit.
        Unauthenticated: 401 ``ERR_BAD_CREDENTIALS`` (unknown user or wrong password: the
            same answer, after the same Argon2 work).
        Forbidden: 403 ``ERR_USER_DISABLED`` (only said once the password was right).
    """
    username = username.strip()
    now = ctx.now()
    window = timedelta(seconds=ctx.settings.login_failure_window_seconds)
    async with ctx.database.transaction() as uow:
        # Alone, before any scope is held: it never waits on, or holds, a scope's row.
        await store.delete_stale_attempts(uow.connection, now - window)
        await uow.commit()
    async with ctx.database.transaction() as uow:
        user = await store.find_user_for_login(uow.connection, username) if username else None
        scopes = _scopes(ctx, user.principal_id if user else username, address)
        await _reserve(ctx, uow.connection, scopes, now)  # refused: nothing is written
        await uow.commit()
    good = await ctx.cpu.passwords.run(
        verify_password, user.password_hash if user and user.source == "local" else None, password
    )
    if not good or user is None:  # the attempt stays counted
        log.info("user.sign_in_failed", username=username[:100], address=address)
        raise Unauthenticated(
            "the username or password is not right", error_code=ErrorCode.BAD_CREDENTIALS
        )
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        for scope in scopes:
            if scope.failures_only:
                await store.give_back_attempt(conn, scope.key)
            else:
                await store.forget_attempts(conn, scope.key)
        if user.disabled_at is not None:
            await uow.commit()
            raise Forbidden(
                "this account is disabled; ask an administrator", error_code=ErrorCode.USER_DISABLED
            )
        session = await _open_session(ctx, conn, user, now)
        await uow.commit()
    log.info("user.signed_in", principal_id=user.principal_id, method="password")
    return session


async def _open_session(
    ctx: ServiceContext, conn: Any, user: User, now: datetime
) -> SignedInSession:
    idle = timedelta(seconds=ctx.settings.session_idle_seconds)
    longest = timedelta(seconds=ctx.settings.session_max_seconds)
    await store.delete_stale_sessions(conn, idle_before=now - idle, created_before=now - longest)
    session_id = secrets.token_urlsafe(32)
    await store.insert_session(conn, id_hash=hash_token(session_id), user_id=user.id, now=now)
    return SignedInSession(session_id, user)


@dataclass(frozen=True)
class Identity:
    """Who the identity provider vouched for: its account ``(issuer, subject)`` is the
    key; the rest is what it says about them."""

    issuer: str
    subject: str
    principal_id: str
    """The name a new account gets (the configured claim); never used to find one."""
    email: str | None
    email_verified: bool
    groups: list[str]
    role: Role


async def sign_in_oidc(ctx: ServiceContext, identity: Identity) -> SignedInSession:
    """Open a session for someone the identity provider vouched for. The user linked to
    their ``(issuer, subject)`` is found (or created, named by ``principal_id``) and
    brought up to date: role and groups from the provider, the e-mail address only when
    the provider says it is verified.

    Raises:
        Forbidden: 403 ``ERR_USER_DISABLED``; 403 ``ERR_ACCOUNT_IS_LOCAL`` when the name
            belongs to another principal (a password user, an API key's principal, another
            identity), or looks like one's (:mod:`signoff.domain.names`): single sign-on
            never takes one over unless an administrator linked it (``signoff link-sso``).
    """
    try:
        return await _sign_in_oidc(ctx, identity)
    except store.UserExists:
        # Two first sign-ins of one identity at once (two tabs): the other created the
        # account a moment ago. Once more, and this one finds it.
        return await _sign_in_oidc(ctx, identity)
    except Forbidden as refusal:
        # The other tab's account can also become visible between this one's two reads
        # (by identity: none yet; by name: there it is): once more, and the read by
        # identity finds it. A name that really is another account's is refused again.
        if refusal.error_code is not ErrorCode.ACCOUNT_IS_LOCAL:
            raise
        return await _sign_in_oidc(ctx, identity)


async def _sign_in_oidc(ctx: ServiceContext, identity: Identity) -> SignedInSession:
    groups = [g for g in identity.groups if g and not any(c.isspace() or c == "," for c in g)]
    principal_id = normal_name(identity.principal_id)
    check_identity(principal_id, identity.role, groups, None)
    email = identity.email if identity.email_verified else None
    if email is not None:
        try:
            check_identity(principal_id, identity.role, groups, email)
        except Unprocessable:
            email = None
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        user = await store.find_user_by_identity(conn, identity.issuer, identity.subject)
        if (
            user is not None
            and email is not None
            and await store.email_in_use(conn, email, other_than=user.principal_id)
        ):
            email = None
        if user is None:
            if await store.find_user(conn, principal_id) is not None or (
                await keys_store.principal_has_keys(conn, principal_id)
            ):
                log.info(
                    "user.sso_name_taken",
                    principal_id=principal_id,
                    issuer=identity.issuer,
                    subject=identity.subject[:200],
                )
                raise Forbidden(
                    f"the name {principal_id} belongs to another account here; an "
                    "administrator can link your single sign-on identity to it",
                    error_code=ErrorCode.ACCOUNT_IS_LOCAL,
                )
            similar = await names.look_alike_of(conn, principal_id)
            if similar is not None:
                log.info("user.sso_name_look_alike", principal_id=principal_id, similar=similar)
                raise Forbidden(
                    f"the name {principal_id} looks like {similar}, another account here; an "
                    "administrator can link your single sign-on identity to the right account",
                    error_code=ErrorCode.ACCOUNT_IS_LOCAL,
                )
            if email is not None and await store.email_in_use(conn, email, other_than=None):
                email = None
            user = await store.insert_user(
                conn,
                user_id=uuid.uuid4(),
                principal_id=principal_id,
                role=identity.role,
                groups=groups,
                email=email,
                password_hash=None,
                source="oidc",
                now=now,
                oidc_issuer=identity.issuer,
                oidc_subject=identity.subject,
            )
        elif user.disabled_at is not None:
            raise Forbidden(
                "this account is disabled; ask an administrator", error_code=ErrorCode.USER_DISABLED
            )
        else:
            values: dict[str, Any] = {"role": identity.role.value, "groups": groups}
            if email is not None:
                values["email"] = email
            user = await store.update_user(conn, user.id, updated_at=now, **values)
        session = await _open_session(ctx, conn, user, now)
        await uow.commit()
    log.info(
        "user.signed_in", principal_id=user.principal_id, method="oidc", role=identity.role.value
    )
    return session


async def resume_session(ctx: ServiceContext, session_id: str) -> User | None:
    """The user of a live session, or ``None`` when the session is unknown, ended,
    idle too long, too old, or its user is disabled (the session is then removed)."""
    id_hash = hash_token(session_id)
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        found = await store.find_session(uow.connection, id_hash)
    if found is None:
        return None
    row, user = found
    idle = timedelta(seconds=ctx.settings.session_idle_seconds)
    longest = timedelta(seconds=ctx.settings.session_max_seconds)
    live = (
        user.disabled_at is None
        and now - row.last_seen_at < idle
        and now - row.created_at < longest
    )
    if live and now - row.last_seen_at < timedelta(seconds=SESSION_TOUCH_SECONDS):
        return user
    async with ctx.database.transaction() as uow:
        if live:
            await store.touch_session(uow.connection, id_hash, now)
        else:
            await store.delete_session(uow.connection, id_hash)
        await uow.commit()
    return user if live else None


async def sign_out(ctx: ServiceContext, session_id: str) -> None:
    async with ctx.database.transaction() as uow:
        await store.delete_session(uow.connection, hash_token(session_id))
        await uow.commit()
