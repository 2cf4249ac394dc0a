"""Users, their console sessions, set-password links and failed sign-ins."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import Role
from signoff.domain.users import User
from signoff.store.tables import login_failures, password_tokens, user_sessions, users

U = users.c
S = user_sessions.c
P = password_tokens.c
F = login_failures.c


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
) -> User:
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
                created_at=now,
                updated_at=now,
            )
            .returning(*users.c)
        )
    ).one()
    return _user(row)


async def find_user(conn: AsyncConnection, principal_id: str) -> User | None:
    row = (await conn.execute(select(users).where(U.principal_id == principal_id))).first()
    return _user(row) if row else None


async def find_user_by_id(conn: AsyncConnection, user_id: uuid.UUID) -> User | None:
    row = (await conn.execute(select(users).where(U.id == user_id))).first()
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


# Failed sign-ins ------------------------------------------------------------------------


async def failures_since(
    conn: AsyncConnection, scope: str, since: datetime
) -> tuple[int, datetime | None]:
    """How many failures ``scope`` had since ``since``, and the oldest of them."""
    row = (
        await conn.execute(
            select(func.count(), func.min(F.failed_at)).where(
                F.scope == scope, F.failed_at >= since
            )
        )
    ).one()
    oldest = row[1]
    if isinstance(oldest, str):  # SQLite aggregates lose the column type
        oldest = datetime.fromisoformat(oldest)
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)
    return int(row[0]), oldest


async def record_failure(conn: AsyncConnection, scope: str, now: datetime) -> None:
    await conn.execute(insert(login_failures).values(id=uuid.uuid4(), scope=scope, failed_at=now))


async def forget_failures(
    conn: AsyncConnection, scopes: list[str], *, before: datetime | None = None
) -> None:
    """Delete the failures of ``scopes`` (all of them, or only those older than ``before``)."""
    statement = delete(login_failures).where(F.scope.in_(scopes))
    if before is not None:
        statement = statement.where(F.failed_at < before)
    await conn.execute(statement)
