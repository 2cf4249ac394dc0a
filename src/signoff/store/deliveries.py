"""The dispatcher's queries: whether there is work, fan-out, claims and attempts.

Dispatcher steps, each in its own short transaction:

1. :func:`fan_out_outbox` turns new outbox events into one delivery per interested
   endpoint (``SKIP LOCKED`` so dispatchers split the work), never an event whose task
   has an earlier event still waiting for its fan-out;
2. :func:`claim_due_deliveries` leases due deliveries — never one whose earlier event for
   the same task and endpoint is still pending, so each receiver sees a task's events in
   order;
3. :func:`record_attempts` stores the results (many attempts at once), fenced by the
   lease owner and attempt number so a dispatcher whose lease lapsed cannot overwrite a
   newer attempt;
4. retention (the sweeper's, :mod:`signoff.store.delivery_retention`) removes old
   finished deliveries and then old fanned-out events left without any delivery.

Endpoints, and what an admin reads of deliveries, are in :mod:`signoff.store.webhooks`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased
from sqlalchemy.sql.elements import ColumnClause

from signoff.domain.webhooks import (
    ClaimedDelivery,
    DeliveryStatus,
    EndpointFilter,
    endpoint_wants,
)
from signoff.store import lite
from signoff.store.batch import picked
from signoff.store.evidence import REPORTED_RECEIPT, REPORTED_RECORD
from signoff.store.runtime.database import Database
from signoff.store.tables import (
    delivery_attempts,
    outbox_events,
    review_tasks,
    webhook_deliveries,
    webhook_endpoints,
)

E = webhook_endpoints.c
D = webhook_deliveries.c
A = delivery_attempts.c
O = outbox_events.c  # noqa: E741

#: ``status = 'PENDING'`` written into the SQL, not bound: asyncpg prepares statements
#: and PostgreSQL soon plans them generically, and a generic plan can use a partial index
#: (``WHERE status = 'PENDING'``) only when the condition is a literal. With a parameter
#: the claim scanned every delivery and compared each pending one with every other: a
#: backlog of 2,000 made each claim take a second.
PENDING: ColumnClause[str] = literal_column("'PENDING'")


@dataclass(frozen=True)
class PendingWork:
    """What a dispatcher round would find: events to fan out, deliveries due."""

    unfanned: bool
    due: bool

    def __bool__(self) -> bool:
        return self.unfanned or self.due


def _has_work_sql(now: str) -> str:
    """``now``: the parameter's placeholder, a constant of this module."""
    # Assembled at import from the placeholders below; no input reaches it.
    return (
        "SELECT EXISTS (SELECT 1 FROM outbox_events WHERE fanned_out_at IS NULL),"  # noqa: S608
        " EXISTS (SELECT 1 FROM webhook_deliveries WHERE status = 'PENDING'"
        f" AND next_attempt_at <= {now} AND (leased_until IS NULL OR leased_until <= {now}))"
    )


#: :func:`has_work` written once: a dispatcher asks it at every round, up to
#: 1/``SIGNOFF_DISPATCHER_COALESCE_SECONDS`` times a second in every process, and built by
#: SQLAlchemy each time that read cost a serving process 4 % of its CPU under W1's
#: escalations. On PostgreSQL a prepared statement on the hot path's pool (``$1``: now);
#: on SQLite a read in the process's SQLite thread.
HAS_WORK_SQL = _has_work_sql("$1::timestamptz")
HAS_WORK_LITE = lite.statement("has_work", _has_work_sql(":now"), {"now": D.next_attempt_at})


async def has_work_now(database: Database, *, now: datetime) -> PendingWork:
    """:func:`has_work`, as one statement."""
    if database.dialect == "postgresql":
        row = (await database.one_statement(HAS_WORK_SQL, now))[0]
    elif database.sqlite_file is not None:
        # A lone SELECT (its own read transaction), queued in the thread with the writes.
        params = HAS_WORK_LITE.params({"now": now})
        row = await database.sqlite_script(
            lambda connection: connection.execute(HAS_WORK_LITE.sql, params).fetchone()
        )
    else:  # SQLite in memory: no thread of its own
        return await database.run_read(lambda conn: has_work(conn, now=now))
    return PendingWork(unfanned=bool(row[0]), due=bool(row[1]))


async def has_work(conn: AsyncConnection, *, now: datetime) -> PendingWork:
    """What a dispatcher round would find, in one read, so idle dispatchers take no write
    lock (on SQLite every write transaction serialises with the API's)."""
    unfanned = select(O.id).where(O.fanned_out_at.is_(None))
    due = select(D.id).where(
        D.status == PENDING,
        D.next_attempt_at <= now,
        or_(D.leased_until.is_(None), D.leased_until <= now),
    )
    row = (await conn.execute(select(unfanned.exists(), due.exists()))).one()
    return PendingWork(unfanned=bool(row[0]), due=bool(row[1]))


async def endpoints_for_fan_out(conn: AsyncConnection) -> Sequence[Any]:
    """Enabled endpoints with what decides which events they get: event and entity type
    filters, and the producer a producer-scoped endpoint belongs to."""
    return (
        await conn.execute(
            select(E.id, E.event_types, E.entity_types, E.producer_id).where(E.enabled.is_(True))
        )
    ).all()


async def fan_out_outbox(conn: AsyncConnection, *, now: datetime, limit: int) -> int:
    """Create deliveries for up to ``limit`` new outbox events; returns how many events
    (:func:`fan_out` also says how many deliveries)."""
    events, _deliveries = await fan_out(conn, now=now, limit=limit)
    return events


async def fan_out(conn: AsyncConnection, *, now: datetime, limit: int) -> tuple[int, int]:
    """Create deliveries for up to ``limit`` new outbox events; returns how many events
    were fanned out and how many deliveries they made.

    An event is taken only with every earlier waiting event of its task (see
    :func:`_in_task_order`)."""
    # The batch is locked from the outbox alone (its partial index gives the order), run
    # once (store/batch.py); what the endpoints' filters need then comes from the task
    # row (a task's producer and entity type never change), not from decoding payloads.
    batch = (
        select(O.id, O.event_type, O.task_id, O.task_version, O.created_at)
        .where(O.fanned_out_at.is_(None))
        .order_by(O.created_at, O.task_version)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("fan_out_batch")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    task = review_tasks.c
    events = (
        await conn.execute(
            select(
                batch.c.id,
                batch.c.event_type,
                batch.c.task_id,
                batch.c.task_version,
                task.producer_id,
                task.entity_type,
            )
            .join(review_tasks, task.id == batch.c.task_id)
            .order_by(batch.c.created_at, batch.c.task_version)
        )
    ).all()
    events = await _in_task_order(conn, events)
    if not events:
        return 0, 0
    endpoints = await endpoints_for_fan_out(conn)
    rows = [
        {
            "id": uuid.uuid4(),
            "endpoint_id": endpoint.id,
            "event_id": event.id,
            "task_id": event.task_id,
            "task_version": event.task_version,
            "status": DeliveryStatus.PENDING.value,
            "attempt_count": 0,
            "next_attempt_at": now,
            "created_at": now,
            "updated_at": now,
        }
        for event in events
        for endpoint in endpoints
        if endpoint_wants(
            EndpointFilter(endpoint.event_types, endpoint.entity_types, endpoint.producer_id),
            event.event_type,
            {"producer_id": event.producer_id, "entity_type": event.entity_type},
        )
    ]
    if rows:
        dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        await conn.execute(dialect_insert(webhook_deliveries).on_conflict_do_nothing(), rows)
    await conn.execute(
        update(outbox_events).where(O.id.in_([e.id for e in events])).values(fanned_out_at=now)
    )
    return len(events), len(rows)


async def _in_task_order(conn: AsyncConnection, events: Sequence[Any]) -> Sequence[Any]:
    """Drop each event that an earlier, still waiting event of the same task did not come
    with (it is locked by another dispatcher's uncommitted fan-out, or fell outside the
    batch). Step 2's order check sees only deliveries that exist: without this rule a
    second dispatcher, skipping the locked event, would fan out and send the task's next
    event first. A dropped event waits for a later round, when the earlier one's
    deliveries are committed (the same transaction marks it fanned out).

    A separate statement on purpose: on PostgreSQL it sees what committed since the
    batch was locked, so an event fanned out meanwhile no longer blocks (and one still
    uncommitted does)."""
    if not events:
        return events
    taken = [event.id for event in events]
    blocking = (
        await conn.execute(
            select(O.task_id, func.min(O.task_version))
            .where(
                O.task_id.in_({event.task_id for event in events}),
                O.fanned_out_at.is_(None),
                O.id.not_in(taken),
            )
            .group_by(O.task_id)
        )
    ).all()
    first_left_behind = {task_id: version for task_id, version in blocking}
    return [
        event
        for event in events
        if event.task_version < first_left_behind.get(event.task_id, event.task_version + 1)
    ]


def claim_statement(*, owner: str, now: datetime, leased_until: datetime, limit: int) -> Any:
    """The UPDATE that leases up to ``limit`` due deliveries (see
    :func:`claim_due_deliveries`), returning each one's id and attempt number."""
    earlier = aliased(webhook_deliveries)
    due = and_(
        D.status == PENDING,
        D.next_attempt_at <= now,
        or_(D.leased_until.is_(None), D.leased_until <= now),
    )
    candidates = (
        select(D.id)
        .join(webhook_endpoints, E.id == D.endpoint_id)
        .where(
            due,
            E.enabled.is_(True),
            ~exists(
                select(literal_column("1"))
                .select_from(earlier)
                .where(
                    earlier.c.endpoint_id == D.endpoint_id,
                    earlier.c.task_id == D.task_id,
                    earlier.c.status == PENDING,
                    earlier.c.task_version < D.task_version,
                )
                .offset(literal_column("0"))
            ),
        )
        .order_by(D.next_attempt_at)
        .limit(limit)
        .with_for_update(skip_locked=True, of=webhook_deliveries)
    )
    batch = picked(candidates, "due_deliveries")
    return (
        update(webhook_deliveries)
        .where(D.id == batch.c.id)
        .values(
            leased_until=leased_until,
            lease_owner=owner,
            attempt_count=D.attempt_count + 1,
            updated_at=now,
        )
        .returning(D.id, D.attempt_count)
    )


async def claim_due_deliveries(
    conn: AsyncConnection, *, owner: str, now: datetime, leased_until: datetime, limit: int
) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due deliveries to ``owner`` until ``leased_until``."""
    claimed = (
        await conn.execute(
            claim_statement(owner=owner, now=now, leased_until=leased_until, limit=limit)
        )
    ).all()
    if not claimed:
        return []
    attempts = {row.id: row.attempt_count for row in claimed}
    details = await conn.execute(
        select(
            D.id,
            D.endpoint_id,
            E.url,
            E.secret,
            E.previous_secret,
            E.previous_secret_expires_at,
            E.asymmetric_signature,
            O.id.label("event_id"),
            O.payload,
            review_tasks.c.traceparent,
            REPORTED_RECORD.label("record_id"),
            REPORTED_RECEIPT.label("receipt"),
        )
        .join(webhook_endpoints, E.id == D.endpoint_id)
        .join(outbox_events, O.id == D.event_id)
        .outerjoin(review_tasks, review_tasks.c.id == O.task_id)
        .where(D.id.in_(list(attempts)))
    )
    result = []
    for row in details:
        live = [row.secret]
        if (
            row.previous_secret
            and row.previous_secret_expires_at
            and row.previous_secret_expires_at > now
        ):
            live.append(row.previous_secret)
        result.append(
            ClaimedDelivery(
                id=row.id,
                attempt=attempts[row.id],
                endpoint_id=row.endpoint_id,
                url=row.url,
                secrets_newest_first=tuple(live),
                event_id=row.event_id,
                payload=row.payload,
                traceparent=row.traceparent,
                record_id=row.record_id,
                receipt=row.receipt,
                asymmetric=row.asymmetric_signature,
            )
        )
    return result


@dataclass(frozen=True)
class AttemptRow:
    """One finished attempt to store, and the delivery state it leads to."""

    delivery_id: uuid.UUID
    attempt: int
    attempted_at: datetime
    status_code: int | None
    latency_ms: int
    error: str | None
    response_body: str | None
    new_status: DeliveryStatus
    next_attempt_at: datetime | None
    now: datetime


def _settle_statement(*, retry: bool, succeeded: bool) -> Any:
    """UPDATE of one delivery after its attempt (run once per attempt, as executemany),
    fenced by the lease owner and attempt number like the lease itself."""
    values: dict[str, Any] = {
        "status": bindparam("p_status"),
        "leased_until": None,
        "lease_owner": None,
        "last_status_code": bindparam("p_code"),
        "last_error": bindparam("p_error"),
        "updated_at": bindparam("p_now"),
    }
    if retry:
        values["next_attempt_at"] = bindparam("p_next")
    if succeeded:
        values["delivered_at"] = bindparam("p_now")
    return (
        update(webhook_deliveries)
        .where(
            D.id == bindparam("p_id"),
            D.lease_owner == bindparam("p_owner"),
            D.attempt_count == bindparam("p_attempt"),
            D.status == DeliveryStatus.PENDING.value,
        )
        .values(**values)
    )


#: The three shapes of that UPDATE: (a retry is scheduled, the delivery succeeded).
SETTLE_DELIVERY = {
    (retry, succeeded): _settle_statement(retry=retry, succeeded=succeeded)
    for retry, succeeded in ((False, False), (True, False), (False, True))
}


async def record_attempts(
    conn: AsyncConnection, *, owner: str, attempts: Sequence[AttemptRow]
) -> set[uuid.UUID]:
    """Store a group of finished attempts, and the new state of each delivery this
    dispatcher still holds, in a fixed number of statements whatever the group's size.
    Returns the deliveries whose lease ``owner`` still held (an attempt whose lease was
    lost is stored all the same, and its delivery left alone).

    The held deliveries are locked first, in id order, so that what is updated is exactly
    what was found held, and two dispatchers recording at once cannot deadlock.

    Raises:
        sqlalchemy.exc.IntegrityError: a delivery was deleted (with its endpoint) while
            its attempt ran.
    """
    if not attempts:
        return set()
    ids = sorted({a.delivery_id for a in attempts})
    locked = await conn.execute(
        select(D.id, D.attempt_count)
        .where(D.id.in_(ids), D.lease_owner == owner, D.status == DeliveryStatus.PENDING.value)
        .order_by(D.id)
        .with_for_update()
    )
    current = {row.id: row.attempt_count for row in locked}
    await conn.execute(
        insert(delivery_attempts),
        [
            {
                "delivery_id": a.delivery_id,
                "attempt": a.attempt,
                "attempted_at": a.attempted_at,
                "status_code": a.status_code,
                "latency_ms": a.latency_ms,
                "error": a.error,
                "response_body": a.response_body,
            }
            for a in attempts
        ],
    )
    held = [a for a in attempts if current.get(a.delivery_id) == a.attempt]
    shapes: dict[tuple[bool, bool], list[dict[str, Any]]] = {}
    for a in held:
        shape = (a.next_attempt_at is not None, a.new_status is DeliveryStatus.SUCCEEDED)
        shapes.setdefault(shape, []).append(
            {
                "p_id": a.delivery_id,
                "p_owner": owner,
                "p_attempt": a.attempt,
                "p_status": a.new_status.value,
                "p_code": a.status_code,
                "p_error": a.error,
                "p_now": a.now,
                **({"p_next": a.next_attempt_at} if a.next_attempt_at is not None else {}),
            }
        )
    for shape, rows in shapes.items():
        await conn.execute(SETTLE_DELIVERY[shape], rows)
    return {a.delivery_id for a in held}


async def postpone_deliveries(
    conn: AsyncConnection, delivery_ids: Sequence[uuid.UUID], *, owner: str, until: datetime
) -> None:
    """Give back deliveries this dispatcher leased but will not send (it cannot decrypt
    the endpoint's secret): not counted as an attempt, due again at ``until``."""
    await conn.execute(
        update(webhook_deliveries)
        .where(D.id.in_(list(delivery_ids)), D.lease_owner == owner)
        .values(
            leased_until=None,
            lease_owner=None,
            attempt_count=D.attempt_count - 1,
            next_attempt_at=until,
        )
    )
