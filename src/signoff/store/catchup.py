"""The catch-up read: a producer's outbox events, in an order no later commit can enter
behind a reader.

SQLite runs one writer at a time, so the outbox's ``rowid`` grows in commit order. On
PostgreSQL each event keeps the id of the transaction that wrote it (``commit_xid``, a
column default), and only events of transactions older than every one still running
(the snapshot's ``xmin``) are read: a transaction committing later has a larger id, so
it always lands after the cursor. Events of a transaction still open wait for it.

Retention removes old events (:func:`purge_events`); each producer's *horizon* keeps the
last position it removed of that producer's events, so a reader whose cursor lies before
it learns that events are missing instead of skipping them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    func,
    literal,
    literal_column,
    select,
    text,
    true,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.store.delivery_retention import PURGE_EVENTS
from signoff.store.evidence import REPORTED_RECEIPT, REPORTED_RECORD
from signoff.store.tables import catchup_horizons, outbox_events, review_tasks

O = outbox_events.c  # noqa: E741
T = review_tasks.c
H = catchup_horizons.c

#: Transactions older than all still running (PostgreSQL): their events are final.
_SETTLED_BELOW = text("(pg_snapshot_xmin(pg_current_snapshot())::text)::bigint")


class ForeignCursor(ValueError):
    """A position of the other engine's kind: not one this database gave."""


@dataclass(frozen=True)
class Position:
    """Where a reader is: SQLite ``(rowid,)``; PostgreSQL ``(xid, created_at, id)``."""

    order: int
    created_at: datetime | None = None
    event_id: uuid.UUID | None = None

    def _key(self) -> tuple[Any, ...]:
        return (
            (self.order,)
            if self.created_at is None
            else (self.order, self.created_at, self.event_id)
        )

    def before(self, other: Position) -> bool:
        """This position comes before ``other`` in the read's order."""
        return self._key() < other._key()


@dataclass(frozen=True)
class FeedEvent:
    """An outbox event as the feed reads it: where it is, its payload (the webhook body
    without the receipt), the trail record it reports and that record's receipt if signed."""

    position: Position
    payload: dict[str, Any]
    record_id: int | None
    receipt: str | None


async def events_after(
    conn: AsyncConnection, *, producer_id: str | None, after: Position | None, limit: int
) -> list[FeedEvent]:
    """Up to ``limit`` outbox events about ``producer_id``'s tasks (``None``: every
    producer's, for the chat doors' cards) after ``after``, oldest first."""
    if (after is not None) and ((after.created_at is None) == (conn.dialect.name == "postgresql")):
        raise ForeignCursor(conn.dialect.name)
    mine = T.producer_id == producer_id if producer_id is not None else true()
    joined = outbox_events.join(review_tasks, T.id == O.task_id)
    reported = (O.payload, REPORTED_RECORD.label("record_id"), REPORTED_RECEIPT.label("receipt"))
    if conn.dialect.name == "postgresql":
        statement = (
            select(O.commit_xid, O.created_at, O.id, *reported)
            .select_from(joined)
            .where(mine, O.commit_xid < _SETTLED_BELOW)
        )
        if after is not None:
            statement = statement.where(
                tuple_(O.commit_xid, O.created_at, O.id)
                > tuple_(
                    literal(after.order, O.commit_xid.type),
                    literal(after.created_at, O.created_at.type),
                    literal(after.event_id, O.id.type),
                )
            )
        statement = statement.order_by(O.commit_xid, O.created_at, O.id).limit(limit)
        rows = await conn.execute(statement)
        return [FeedEvent(Position(r[0], r[1], r[2]), r[3], r[4], r[5]) for r in rows]
    rowid = literal_column("outbox_events.rowid", Integer)
    statement = select(rowid, *reported).select_from(joined).where(mine)
    if after is not None:
        statement = statement.where(rowid > after.order)
    rows = await conn.execute(statement.order_by(rowid).limit(limit))
    return [FeedEvent(Position(r[0]), r[1], r[2], r[3]) for r in rows]


async def last_position(conn: AsyncConnection) -> Position | None:
    """The position of the newest event a read can return now (``None``: no event)."""
    if conn.dialect.name == "postgresql":
        row = (
            await conn.execute(
                select(O.commit_xid, O.created_at, O.id)
                .where(O.commit_xid < _SETTLED_BELOW)
                .order_by(O.commit_xid.desc(), O.created_at.desc(), O.id.desc())
                .limit(1)
            )
        ).first()
        return None if row is None else Position(row[0], row[1], row[2])
    rowid = literal_column("outbox_events.rowid", Integer)
    newest = (await conn.execute(select(func.max(rowid)).select_from(outbox_events))).scalar()
    return None if newest is None else Position(int(newest))


# Retention and the horizon -------------------------------------------------------------


async def purge_events(
    conn: AsyncConnection, *, cutoff: datetime, limit: int, now: datetime
) -> int:
    """Retention's removal of outbox events (:data:`PURGE_EVENTS`), raising each
    producer's horizon to the last position removed, in the same transaction; returns how
    many events it removed."""
    postgresql = conn.dialect.name == "postgresql"
    where = (
        [O.commit_xid, O.created_at, O.id] if postgresql else [literal_column("rowid", BigInteger)]
    )
    statement = PURGE_EVENTS.returning(O.task_id, *where)
    removed = (await conn.execute(statement, {"cutoff": cutoff, "limit": limit})).all()
    if not removed:
        return 0
    owners = await conn.execute(
        select(T.id, T.producer_id).where(T.id.in_({row[0] for row in removed}))
    )
    producer_of = {task_id: producer for task_id, producer in owners}
    last: dict[str, Position] = {}
    for task_id, *at in removed:
        position, producer = Position(*at), producer_of[task_id]
        if producer not in last or last[producer].before(position):
            last[producer] = position
    for producer, position in sorted(last.items()):  # one lock order for every sweeper
        await conn.execute(_raise_horizon(postgresql, producer, position, now))
    return len(removed)


def _raise_horizon(postgresql: bool, producer: str, position: Position, now: datetime) -> Any:
    """The producer's horizon, moved to ``position`` unless it is already past it."""
    values = {
        "producer_id": producer,
        "position": position.order,
        "created_at": position.created_at,
        "event_id": position.event_id,
        "updated_at": now,
    }
    if postgresql:
        pg = postgresql_insert(catchup_horizons).values(values)
        new = pg.excluded
        return pg.on_conflict_do_update(
            index_elements=[H.producer_id],
            set_={name: new[name] for name in values if name != "producer_id"},
            where=tuple_(H.position, H.created_at, H.event_id)
            < tuple_(new.position, new.created_at, new.event_id),
        )
    lite = sqlite_insert(catchup_horizons).values(values)
    return lite.on_conflict_do_update(
        index_elements=[H.producer_id],
        set_={"position": lite.excluded.position, "updated_at": lite.excluded.updated_at},
        where=H.position < lite.excluded.position,
    )


async def horizon(conn: AsyncConnection, producer_id: str) -> Position | None:
    """The last position retention removed of ``producer_id``'s events (``None``: none
    removed). Read it *after* the events: a removal committed in between then shows here."""
    row = (
        await conn.execute(
            select(H.position, H.created_at, H.event_id).where(H.producer_id == producer_id)
        )
    ).first()
    return None if row is None else Position(row[0], row[1], row[2])


# What holds the read back (PostgreSQL) --------------------------------------------------


@dataclass(frozen=True)
class HeldBack:
    """Committed events the read cannot return yet: a transaction older than them is still
    open somewhere on the server. The oldest such transaction is named when the server's
    ``pg_stat_activity`` shows it to this role (otherwise those fields are ``None``)."""

    events: int
    oldest_event_at: datetime
    pid: int | None = None
    application_name: str | None = None
    user: str | None = None
    state: str | None = None
    transaction_seconds: float | None = None


#: Committed events behind the oldest transaction still running.
HELD_EVENTS = select(func.count(), func.min(O.created_at)).where(O.commit_xid >= _SETTLED_BELOW)
#: The running transaction with the oldest id: the one the snapshot's ``xmin`` waits for.
OLDEST_WRITER = text(
    "SELECT pid, application_name, usename, state,"
    " EXTRACT(EPOCH FROM clock_timestamp() - xact_start)::float8"
    " FROM pg_stat_activity"
    " WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
    " ORDER BY age(backend_xid) DESC LIMIT 1"
)


async def held_back(conn: AsyncConnection) -> HeldBack | None:
    """What holds the read back on PostgreSQL (``None``: nothing; always on SQLite, whose
    one writer commits in order)."""
    if conn.dialect.name != "postgresql":
        return None
    count, oldest = (await conn.execute(HELD_EVENTS)).one()
    if not count:
        return None
    writer = (await conn.execute(OLDEST_WRITER)).first()
    if writer is None:  # ended meanwhile, or not visible to this role
        return HeldBack(int(count), oldest)
    pid, application, user, state, seconds = writer
    return HeldBack(int(count), oldest, pid, application, user, state, seconds)
