"""Users, their console sessions, set-password links and failed sign-ins."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, insert, or_, select, union, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import Role
from signoff.domain.users import User
from signoff.store.tables import api_keys, login_attempts, password_tokens, user_sessions, users

U = users.c
S = user_sessions.c
P = password_tokens.c
A = login_attempts.c


def _user(row: Any) -> User:
    return User(
        id=row.id,
        principal_id=row.principal_id,
        role=Role(row.role),
        groups=tuple(row.groups or ()),
        email=row.email,
        password_hash=row.password_hash,
        source=row.source,
        disabled_at=row.disabled_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        oidc_issuer=row.oidc_issuer,
        oidc_subject=row.oidc_subject,
        notify=row.notify,
    )


async def insert_user(
    conn: AsyncConnection,
    *,
    user_id: uuid.UUID,
    principal_id: str,
    role: Role,
    groups: list[str],
    email: str | None,
    password_hash: str | None,
    source: str,
    now: datetime,
    oidc_issuer: str | None = None,
    oidc_subject: str | None = None,
) -> User:
    """Raises:
    UserExists: another transaction took the name, the e-mail address or the identity
        first (the unique constraints refused it; the transaction must be rolled back).
    """
    try:
        row = (
            await conn.execute(
                insert(users)
                .values(
                    id=user_id,
                    principal_id=principal_id,
                    role=role.value,
                    groups=groups,
                    email=email,
                    password_hash=password_hash,
                    source=source,
                    oidc_issuer=oidc_issuer,
                    oidc_subject=oidc_subject,
                    created_at=now,
                    updated_at=now,
                )
                .returning(*users.c)
            )
        ).one()
    except IntegrityError:
        raise UserExists(principal_id) from None
    return _user(row)


class UserExists(Exception):
    """A user with that name, e-mail address or identity was created meanwhile."""


async def find_user(conn: AsyncConnection, principal_id: str) -> User | None:
    row = (await conn.execute(select(users).where(U.principal_id == principal_id))).first()
    return _user(row) if row else None


async def find_user_by_id(conn: AsyncConnection, user_id: uuid.UUID) -> User | None:
    row = (await conn.execute(select(users).where(U.id == user_id))).first()
    return _user(row) if row else None


async def find_user_by_identity(conn: AsyncConnection, issuer: str, subject: str) -> User | None:
    """The user linked to the identity provider's account ``(issuer, subject)``."""
    row = (
        await conn.execute(select(users).where(U.oidc_issuer == issuer, U.oidc_subject == subject))
    ).first()
    return _user(row) if row else None


async def find_user_for_login(conn: AsyncConnection, username: str) -> User | None:
    """The user whose principal id is ``username``, else the one user with that e-mail
    (case-insensitive); ``None`` when several users share the e-mail."""
    user = await find_user(conn, username)
    if user is not None or "@" not in username:
        return user
    rows = (
        await conn.execute(select(users).where(func.lower(U.email) == username.lower()).limit(2))
    ).all()
    return _user(rows[0]) if len(rows) == 1 else None


async def email_in_use(conn: AsyncConnection, email: str, *, other_than: str | None) -> bool:
    statement = select(U.id).where(func.lower(U.email) == email.lower())
    if other_than is not None:
        statement = statement.where(U.principal_id != other_than)
    return (await conn.execute(statement.limit(1))).first() is not None


async def list_users(conn: AsyncConnection) -> list[User]:
    rows = await conn.execute(select(users).order_by(U.principal_id))
    return [_user(row) for row in rows]


async def update_user(conn: AsyncConnection, user_id: uuid.UUID, **values: Any) -> User:
    row = (
        await conn.execute(
            update(users).where(U.id == user_id).values(**values).returning(*users.c)
        )
    ).one()
    return _user(row)


# Sessions ---------------------------------------------------------------------------


async def insert_session(
    conn: AsyncConnection, *, id_hash: str, user_id: uuid.UUID, now: datetime
) -> None:
    await conn.execute(
        insert(user_sessions).values(
            id_hash=id_hash, user_id=user_id, created_at=now, last_seen_at=now
        )
    )


async def find_session(conn: AsyncConnection, id_hash: str) -> tuple[Any, User] | None:
    """The session row and its user (whatever the user's state)."""
    row = (
        await conn.execute(
            select(S.created_at, S.last_seen_at, users)
            .join(users, U.id == S.user_id)
            .where(S.id_hash == id_hash)
        )
    ).first()
    if row is None:
        return None
    return row, _user(row)


async def touch_session(conn: AsyncConnection, id_hash: str, now: datetime) -> None:
    await conn.execute(update(user_sessions).where(S.id_hash == id_hash).values(last_seen_at=now))


async def delete_session(conn: AsyncConnection, id_hash: str) -> None:
    await conn.execute(delete(user_sessions).where(S.id_hash == id_hash))


async def delete_user_sessions(conn: AsyncConnection, user_id: uuid.UUID) -> int:
    result = await conn.execute(delete(user_sessions).where(S.user_id == user_id))
    return int(result.rowcount or 0)


async def delete_stale_sessions(
    conn: AsyncConnection, *, idle_before: datetime, created_before: datetime
) -> None:
    await conn.execute(
        delete(user_sessions).where(
            or_(S.last_seen_at < idle_before, S.created_at < created_before)
        )
    )


# Set-password links -------------------------------------------------------------------


async def insert_password_token(
    conn: AsyncConnection,
    *,
    token_hash: str,
    user_id: uuid.UUID,
    expires_at: datetime,
    now: datetime,
) -> None:
    await conn.execute(
        insert(password_tokens).values(
            token_hash=token_hash, user_id=user_id, expires_at=expires_at, created_at=now
        )
    )


async def find_password_token(conn: AsyncConnection, token_hash: str) -> Any | None:
    return (await conn.execute(select(password_tokens).where(P.token_hash == token_hash))).first()


async def use_password_token(conn: AsyncConnection, token_hash: str, now: datetime) -> bool:
    """Mark the link used; False when it was used already (one winner)."""
    result = await conn.execute(
        update(password_tokens)
        .where(P.token_hash == token_hash, P.used_at.is_(None))
        .values(used_at=now)
        .returning(P.token_hash)
    )
    return result.first() is not None


async def retire_password_tokens(conn: AsyncConnection, user_id: uuid.UUID, now: datetime) -> None:
    """Every unused link of the user stops working (a new one was issued, or a password set)."""
    await conn.execute(
        update(password_tokens).where(P.user_id == user_id, P.used_at.is_(None)).values(used_at=now)
    )


# Sign-in attempts ---------------------------------------------------------------------


async def reserve_attempt(
    conn: AsyncConnection, scope: str, *, limit: int, now: datetime, window_start: datetime
) -> datetime | None:
    """Count one sign-in attempt for ``scope``, in one statement: ``None`` when it was
    counted (fewer than ``limit`` attempts since the window began, or the window has
    passed and a new one begins now), else when the full window began (nothing counted).

    One conditional upsert: on PostgreSQL concurrent attempts queue on the scope's row and
    each sees the count the one before left; SQLite writes one at a time. So no more than
    ``limit`` attempts per window ever pass, however many arrive at once."""
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    proposed = dialect_insert(login_attempts).values(scope=scope, window_started_at=now, attempts=1)
    expired = A.window_started_at < window_start
    statement = proposed.on_conflict_do_update(
        index_elements=[A.scope],
        set_={
            "attempts": case((expired, 1), else_=A.attempts + 1),
            "window_started_at": case((expired, now), else_=A.window_started_at),
        },
        where=or_(expired, A.attempts < limit),
    ).returning(A.scope)
    if (await conn.execute(statement)).first() is not None:
        return None
    started = (await conn.execute(select(A.window_started_at).where(A.scope == scope))).scalar_one()
    return started if isinstance(started, datetime) else now


async def give_back_attempt(conn: AsyncConnection, scope: str) -> None:
    """Un-count one attempt of ``scope`` (it was not a failure)."""
    await conn.execute(
        update(login_attempts)
        .where(A.scope == scope, A.attempts > 0)
        .values(attempts=A.attempts - 1)
    )


async def forget_attempts(conn: AsyncConnection, scope: str) -> None:
    await conn.execute(delete(login_attempts).where(A.scope == scope))


async def delete_stale_attempts(conn: AsyncConnection, window_start: datetime) -> None:
    """Forget scopes whose window has passed. Rows another transaction holds are skipped
    (PostgreSQL), so this never waits: run it in a transaction of its own."""
    stale = (
        select(A.scope)
        .where(A.window_started_at < window_start)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    await conn.execute(delete(login_attempts).where(A.scope.in_(stale)))


async def principal_names(conn: AsyncConnection) -> set[str]:
    """Every principal id a console user or an API key (live or revoked) has."""
    users = select(U.principal_id)
    keys = select(api_keys.c.principal_id)
    return set((await conn.execute(union(users, keys))).scalars())


async def find_user_by_email(conn: AsyncConnection, email: str) -> User | None:
    """The one user with this e-mail (case-insensitive); ``None`` when there is none or
    several share it (an e-mail that names two people names nobody)."""
    rows = (
        await conn.execute(select(users).where(func.lower(U.email) == email.lower()).limit(2))
    ).all()
    return _user(rows[0]) if len(rows) == 1 else None
