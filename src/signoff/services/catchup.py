"""The catch-up read: a producer reads the events of its own tasks since a cursor, the
same documents its webhook endpoints receive, to reconcile after time away."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from signoff.domain.params import decode_token
from signoff.domain.states import Role
from signoff.domain.tasks import Principal, require_role
from signoff.errors import FieldError, Gone, validation_error
from signoff.metrics import CATCHUP_HELD_BACK, CATCHUP_HELD_EVENTS
from signoff.services import evidence
from signoff.services.context import ServiceContext
from signoff.store import catchup as store

PRODUCERS = frozenset({Role.PRODUCER})
MAX_PAGE_SIZE = 500
#: The feed held back longer than this is logged (``catchup.held_back``, a warning).
HELD_BACK_WARN_SECONDS = 5.0

log = structlog.get_logger("signoff.catchup")


@dataclass(frozen=True)
class EventPage:
    events: list[dict[str, Any]]
    #: Where the next read starts: after the last event here (the request's cursor when
    #: nothing was new). Keep it with what the events changed.
    cursor: str | None
    #: The page was full: read again at once with ``cursor``.
    more: bool


def encode_cursor(position: store.Position) -> str:
    parts: list[Any] = [position.order]
    if position.created_at is not None:
        parts += [position.created_at.isoformat(), str(position.event_id)]
    raw = json.dumps(parts, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> store.Position:
    """Raises ``ERR_VALIDATION`` naming ``cursor`` for anything this service did not make."""
    try:
        parts = decode_token(cursor)
        if not isinstance(parts, list) or len(parts) not in (1, 3):
            raise ValueError(cursor)
        order = parts[0]
        if type(order) is not int or not 0 <= order < 2**63:
            raise ValueError(cursor)
        if len(parts) == 1:
            return store.Position(order)
        created_at = datetime.fromisoformat(parts[1])
        if created_at.tzinfo is None:
            raise ValueError(cursor)
        return store.Position(order, created_at, uuid.UUID(parts[2]))
    except (ValueError, TypeError):
        raise _foreign() from None


def _expired(oldest_cursor: str) -> Exception:
    return Gone(
        "retention removed events of your tasks after this cursor; from oldest_cursor on "
        "nothing is missing",
        extra={"oldest_cursor": oldest_cursor},
    )


def _foreign() -> Exception:
    return validation_error([FieldError("cursor", "is not a cursor this service gave")])


async def events_since(
    ctx: ServiceContext, principal: Principal, *, cursor: str | None, limit: int
) -> EventPage:
    """The events of the caller's own tasks after ``cursor`` (``None``: from the first),
    oldest first, at most ``limit``.

    Raises:
        Forbidden: the caller is not a producer.
        Unprocessable: ``ERR_VALIDATION`` for a cursor this service did not give.
        Gone: ``ERR_CURSOR_EXPIRED`` (410) when retention removed events of the caller's
            tasks after ``cursor`` (or, without one, any): its ``oldest_cursor`` is where
            nothing is missing.
    """
    require_role(principal, PRODUCERS, "read their tasks' events")
    after = decode_cursor(cursor) if cursor else None
    async with ctx.database.transaction(write=False) as uow:
        try:
            rows = await store.events_after(
                uow.connection, producer_id=principal.principal_id, after=after, limit=limit
            )
            # After the events: a removal committed since shows here, and is refused.
            removed_to = await store.horizon(uow.connection, principal.principal_id)
        except store.ForeignCursor:
            raise _foreign() from None
    if removed_to is not None and (after is None or after.before(removed_to)):
        raise _expired(encode_cursor(removed_to))
    last = encode_cursor(rows[-1].position) if rows else cursor
    events = await evidence.with_receipts(
        ctx, [(row.record_id, row.receipt, row.payload) for row in rows]
    )
    return EventPage(events=events, cursor=last, more=len(rows) == limit)


async def watch_held_back(ctx: ServiceContext) -> store.HeldBack | None:
    """Measure what holds the catch-up read back (PostgreSQL; one open write transaction
    anywhere on the server holds every producer's events behind it): the metrics
    ``signoff_catchup_held_back_seconds`` and ``_events``, and past
    :data:`HELD_BACK_WARN_SECONDS` one warning line naming the oldest open transaction."""
    async with ctx.database.transaction(write=False) as uow:
        held = await store.held_back(uow.connection)
    if held is None:
        CATCHUP_HELD_BACK.set(0)
        CATCHUP_HELD_EVENTS.set(0)
        return None
    seconds = max(0.0, (ctx.now() - held.oldest_event_at).total_seconds())
    CATCHUP_HELD_BACK.set(seconds)
    CATCHUP_HELD_EVENTS.set(held.events)
    if seconds >= HELD_BACK_WARN_SECONDS:
        log.warning(
            "catchup.held_back",
            held_seconds=round(seconds, 1),
            events=held.events,
            transaction_pid=held.pid,
            transaction_application_name=held.application_name,
            transaction_user=held.user,
            transaction_state=held.state,
            transaction_seconds=(
                None if held.transaction_seconds is None else round(held.transaction_seconds, 1)
            ),
            hint="an open transaction on the database server holds every producer's "
            "GET /events back until it ends; end it (pg_terminate_backend) if it is stuck",
        )
    return held
