"""Queries over the evidence: signing keys, the chained trail records with their
receipts, and checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Text, and_, func, insert, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.evidence import TrailRecord, leaf, time_text
from signoff.store.tables import (
    checkpoints,
    outbox_events,
    receipts,
    review_tasks,
    signing_keys,
    task_events,
)

#: How many records one signing transaction takes at most.
SIGN_BATCH = 500

K = signing_keys.c
R = receipts.c
E = task_events.c
C = checkpoints.c


# --- keys --------------------------------------------------------------------------------


#: The trail record an outbox event reports (the newest of its task, version and type).
REPORTED_RECORD = (
    select(task_events.c.id)
    .where(
        task_events.c.task_id == outbox_events.c.task_id,
        task_events.c.version == outbox_events.c.task_version,
        task_events.c.event_type == outbox_events.c.event_type,
    )
    .order_by(task_events.c.id.desc())
    .limit(1)
    .scalar_subquery()
)
#: That record's receipt, when one was signed.
REPORTED_RECEIPT = (
    select(receipts.c.jws).where(receipts.c.record_id == REPORTED_RECORD).scalar_subquery()
)


async def all_keys(conn: AsyncConnection) -> Sequence[Any]:
    """Every key, newest first: ``kid``, ``public_key``, ``private_key`` (encrypted or
    ``None`` once retired), ``created_at``, ``retired_at``."""
    return (await conn.execute(select(signing_keys).order_by(K.created_at.desc()))).all()


async def add_key(
    conn: AsyncConnection, *, kid: str, public_key: str, private_key: str, now: datetime
) -> bool:
    """Add ``kid`` as the active key, unless a live key is already there (the database
    holds at most one, ``uq_signing_keys_active``): then nothing is added (False), and
    the winner is the one to read."""
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    added = await conn.execute(
        dialect_insert(signing_keys)
        .values(kid=kid, public_key=public_key, private_key=private_key, created_at=now)
        .on_conflict_do_nothing()
        .returning(K.kid)
    )
    return added.first() is not None


async def retire_keys_but(conn: AsyncConnection, kid: str, now: datetime) -> None:
    """Retire every live key other than ``kid``: its private half is dropped."""
    await conn.execute(
        update(signing_keys)
        .where(K.kid != kid, K.retired_at.is_(None))
        .values(retired_at=now, private_key=None)
    )


# --- records and receipts ----------------------------------------------------------------

_RECORD = (
    E.id,
    E.task_id,
    E.event_type,
    E.action,
    E.status,
    E.version,
    E.actor_id,
    E.actor_role,
    E.created_at,
    E.details,
    E.prev_hash,
    E.hash,
)


def _record(row: Any) -> TrailRecord:
    return TrailRecord(
        id=int(row.id),
        task_id=str(row.task_id),
        event_type=row.event_type,
        action=row.action,
        status=row.status,
        version=int(row.version),
        actor_id=row.actor_id,
        actor_role=row.actor_role,
        created_at=time_text(row.created_at),
        details=row.details_text,
        prev_hash=row.prev_hash or "",
        hash=row.hash or "",
    )


def _records_query() -> Any:
    # The details as stored (the hash is over those bytes), not re-serialised.
    raw = func.coalesce(E.details.cast(Text), "")
    return select(*_RECORD, raw.label("details_text"), R.jws).outerjoin(
        receipts, R.record_id == E.id
    )


async def task_records(
    conn: AsyncConnection, task_id: uuid.UUID
) -> list[tuple[TrailRecord, str | None]]:
    """The task's trail records, oldest first, each with its receipt (or ``None``)."""
    rows = await conn.execute(_records_query().where(E.task_id == task_id).order_by(E.id))
    return [(_record(row), row.jws) for row in rows]


async def newest_record(
    conn: AsyncConnection, task_id: uuid.UUID
) -> tuple[TrailRecord, str | None] | None:
    """The task's newest record with its receipt (or ``None``), one indexed read."""
    query = _records_query().where(E.task_id == task_id).order_by(E.id.desc()).limit(1)
    row = (await conn.execute(query)).first()
    return None if row is None else (_record(row), row.jws)


async def unsigned_records(
    conn: AsyncConnection,
    *,
    task_id: uuid.UUID | None = None,
    record_ids: Sequence[int] | None = None,
    after_id: int = 0,
    limit: int | None = None,
) -> list[TrailRecord]:
    """Linked records with no receipt yet, oldest first: of one task, of the given ids,
    or (neither) after ``after_id`` (the last checkpoint's: the range stays short)."""
    query = _records_query().where(R.record_id.is_(None), E.hash.is_not(None))
    if task_id is not None:
        query = query.where(E.task_id == task_id)
    elif record_ids is not None:
        query = query.where(E.id.in_(list(record_ids)))
    else:
        query = query.where(E.id > after_id)
    rows = await conn.execute(query.order_by(E.id).limit(limit or SIGN_BATCH))
    return [_record(row) for row in rows]


async def add_receipts(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Store receipts; one another process stored first is kept (both are valid)."""
    if not rows:
        return
    statement = (
        postgresql.insert(receipts).on_conflict_do_nothing()
        if conn.dialect.name == "postgresql"
        else sqlite.insert(receipts).on_conflict_do_nothing()
    )
    await conn.execute(statement, list(rows))


async def export_marks(conn: AsyncConnection) -> tuple[int, int]:
    """The newest record id and checkpoint number now (0 for none): an export reads up to
    these, so pages read one after another describe the trail as it stood here."""
    newest = (await conn.execute(select(func.max(E.id)))).scalar()
    last = (await conn.execute(select(func.max(C.seq)))).scalar()
    return int(newest or 0), int(last or 0)


async def records_page(
    conn: AsyncConnection,
    since: datetime | None,
    until: datetime | None,
    *,
    upto: int,
    after: tuple[uuid.UUID, int] | None,
    limit: int,
) -> list[tuple[TrailRecord, str | None]]:
    """At most ``limit`` records (ids up to ``upto``) of the tasks that have a record in
    ``[since, until)``, by task then id (whole chains: a chain is checked from its
    start), each with its receipt; the page after the record ``after`` (task id, record
    id), read by that key."""
    # Walked in the trail's (task, id) index from the page's key, each task kept if it has
    # a record in the range: a page costs what it walks, not a scan of the whole range.
    touching = task_events.alias("touching")
    in_range = select(touching.c.id).where(touching.c.task_id == E.task_id, touching.c.id <= upto)
    if since is not None:
        in_range = in_range.where(touching.c.created_at >= since)
    if until is not None:
        in_range = in_range.where(touching.c.created_at < until)
    query = _records_query().where(E.id <= upto)
    if after is not None:
        task_id, record_id = after
        # A row comparison: the index is entered at the key, not filtered from its start.
        query = query.where(tuple_(E.task_id, E.id) > tuple_(task_id, record_id))
        in_range = in_range.where(touching.c.task_id >= task_id)
    query = query.where(in_range.exists()).order_by(E.task_id, E.id).limit(limit)
    return [(_record(row), row.jws) for row in await conn.execute(query)]


async def tasks_by_id(conn: AsyncConnection, task_ids: Sequence[uuid.UUID]) -> list[Any]:
    if not task_ids:
        return []
    rows = await conn.execute(select(review_tasks).where(review_tasks.c.id.in_(task_ids)))
    return list(rows)


# --- checkpoints -------------------------------------------------------------------------


async def last_checkpoint(conn: AsyncConnection) -> Any | None:
    return (await conn.execute(select(checkpoints).order_by(C.seq.desc()).limit(1))).first()


async def checkpoints_page(
    conn: AsyncConnection, *, after: int, upto: int, leaves: int
) -> Sequence[Any]:
    """The checkpoints after number ``after`` up to ``upto``, in order, with at most
    ``leaves`` leaves in all (or the first alone, when it has more): the sizes are read
    first, then the rows that fit."""
    sizes = await conn.execute(
        select(C.seq, C.size).where(C.seq > after, C.seq <= upto).order_by(C.seq).limit(leaves)
    )
    last, total = None, 0
    for seq, size in sizes:
        if last is not None and total + int(size) > leaves:
            break
        last, total = int(seq), total + int(size)
    if last is None:
        return []
    query = select(checkpoints).where(C.seq > after, C.seq <= last).order_by(C.seq)
    return (await conn.execute(query)).all()


async def leaves_after(
    conn: AsyncConnection, after_id: int, upto_created: datetime, limit: int
) -> list[tuple[int, str]]:
    """``(id, leaf)`` of linked records after ``after_id`` written before
    ``upto_created``, in id order, at most ``limit``."""
    rows = await conn.execute(
        select(E.id, E.task_id, E.created_at, E.hash)
        .where(and_(E.id > after_id, E.created_at < upto_created, E.hash.is_not(None)))
        .order_by(E.id)
        .limit(limit)
    )
    return [
        (int(row.id), leaf(int(row.id), str(row.task_id), time_text(row.created_at), row.hash))
        for row in rows
    ]


async def add_checkpoint(conn: AsyncConnection, values: dict[str, Any]) -> None:
    await conn.execute(insert(checkpoints).values(**values))
