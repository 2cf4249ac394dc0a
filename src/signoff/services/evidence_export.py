"""The evidence bundle ``signoff verify`` checks (docs/evidence.md), written as a stream:
the trail and the checkpoints are read a page at a time, each page written before the
next is read, so an export of any range holds one page at once. The CLI and the HTTP
route write the same fragments."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.evidence_check import BUNDLE_FORMAT
from signoff.domain.json_output import compact_json_stream
from signoff.domain.states import Role
from signoff.domain.tasks import Principal, require_role
from signoff.services.context import ServiceContext
from signoff.services.evidence import jwks, parse_range, sign_pending
from signoff.store import evidence as store


async def admin_export(
    ctx: ServiceContext, principal: Principal, since: str | None, until: str | None
) -> AsyncIterator[str]:
    """:func:`export_stream` for an admin; the refusals come before the first fragment."""
    require_role(principal, frozenset({Role.ADMIN}), "export evidence")
    start, end = parse_range(since, until)
    return await export_stream(ctx, since=start, until=end)


async def export_stream(
    ctx: ServiceContext, *, since: datetime | None = None, until: datetime | None = None
) -> AsyncIterator[str]:
    """The bundle as JSON text in fragments: whole chains of the tasks with a record in
    the range, their receipts, every checkpoint with its leaves, and the public keys.
    Pending receipts are signed, the trail's newest record and checkpoint noted and the
    keys read before this returns (a failure then is an ordinary error); the pages are
    read as the fragments are taken, each in a short read transaction of its own, up to
    the noted marks."""
    await sign_pending(ctx)
    async with ctx.database.transaction(write=False) as uow:
        newest, last = await store.export_marks(uow.connection)
    bundle: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "exported_at": rfc3339(ctx.now()),
        "since": None if since is None else rfc3339(since),
        "until": None if until is None else rfc3339(until),
        "keys": await jwks(ctx),
        "records": _records(ctx, since, until, newest),
        "checkpoints": _checkpoints(ctx, last),
    }
    return compact_json_stream(bundle)


async def _records(
    ctx: ServiceContext, since: datetime | None, until: datetime | None, upto: int
) -> AsyncIterator[list[dict[str, Any]]]:
    size = ctx.settings.export_page_size
    after: tuple[uuid.UUID, int] | None = None
    while True:
        async with ctx.database.transaction(write=False) as uow:
            page = await store.records_page(
                uow.connection, since, until, upto=upto, after=after, limit=size
            )
        if page:
            yield [record.as_json() | {"receipt": jws} for record, jws in page]
        if len(page) < size:
            return
        after = (uuid.UUID(page[-1][0].task_id), page[-1][0].id)


async def _checkpoints(ctx: ServiceContext, upto: int) -> AsyncIterator[list[dict[str, Any]]]:
    after = 0
    while after < upto:
        async with ctx.database.transaction(write=False) as uow:
            page = await store.checkpoints_page(
                uow.connection, after=after, upto=upto, leaves=ctx.settings.export_page_size
            )
        if not page:
            return
        yield [{"checkpoint": mark.jws, "leaves": mark.leaves} for mark in page]
        after = int(page[-1].seq)
