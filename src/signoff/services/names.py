"""The look-alike rule for new accounts' names (:mod:`signoff.domain.names`), read from
the database: every door that creates an account asks here."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.names import look_alike
from signoff.store import users as store


async def look_alike_of(conn: AsyncConnection, principal_id: str) -> str | None:
    """An existing principal (a console user or an API key's) that ``principal_id`` would
    be confused with: the same name once normalised and case-folded, not the same name."""
    return look_alike(principal_id, await store.principal_names(conn))
