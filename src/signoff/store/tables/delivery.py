"""The outbox and its delivery: events to publish, webhook endpoints, deliveries and
their attempts."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    Uuid,
    false,
    text,
)

from signoff.store.tables.columns import JsonText, UtcDateTime, metadata

#: The transactional outbox: written in the same transaction as the change it describes;
#: the dispatcher (a later component) delivers from here.
outbox_events = Table(
    "outbox_events",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("event_type", String(64), nullable=False),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("payload", JsonText, nullable=False),
    Column("task_version", Integer, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("fanned_out_at", UtcDateTime),
    #: PostgreSQL: the writing transaction's id (a column default), the catch-up read's
    #: order (store/catchup.py); SQLite orders by rowid and leaves it empty.
    Column("commit_xid", BigInteger),
    Index("ix_outbox_events_task_id", "task_id", "created_at"),
    Index("ix_outbox_events_commit_xid", "commit_xid"),
    # The dispatcher's fan-out scans only events not yet turned into deliveries.
    Index(
        "ix_outbox_events_pending_fan_out",
        "created_at",
        postgresql_where=text("fanned_out_at IS NULL"),
        sqlite_where=text("fanned_out_at IS NULL"),
    ),
    # Retention finds the oldest fanned-out events without reading the others.
    Index(
        "ix_outbox_events_fanned_out",
        "created_at",
        postgresql_where=text("fanned_out_at IS NOT NULL"),
        sqlite_where=text("fanned_out_at IS NOT NULL"),
    ),
)

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("url", Text, nullable=False),
    Column("description", Text),
    Column("event_types", JsonText),
    Column("entity_types", JsonText),
    Column("enabled", Boolean, nullable=False),
    Column("disabled_reason", Text),
    # The signing secret must be readable to sign; it never leaves the database except
    # in the responses that create or rotate it, and is stored encrypted
    # (``fernet:…``, signoff.crypto), like ``previous_secret``.
    Column("secret", Text, nullable=False),
    Column("previous_secret", Text),
    Column("previous_secret_expires_at", UtcDateTime),
    Column("failing_since", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # Producer-scoped subscriptions: a producer's endpoint gets only its own tasks'
    # events; NULL (an admin's endpoint) gets everyone's.
    Column("producer_id", Text),
    # Also sign each delivery with the server's Ed25519 key (Standard Webhooks ``v1a``).
    Column("asymmetric_signature", Boolean, nullable=False, server_default=false()),
)

#: Whether any endpoint could be sent an event written now (SQL, both engines). An event
#: written while none is enabled is stored already fanned out (``fanned_out_at`` = its
#: ``created_at``): no dispatcher has to visit it, and no endpoint registered or enabled
#: later gets it. Endpoints get the events of the changes made while they are registered
#: and enabled; an event still waiting for its fan-out when one is registered may reach
#: it too (docs/webhooks.md), and a statement that runs while the first endpoint is being
#: registered may or may not see it.
ANY_ENABLED_ENDPOINT_SQL = "EXISTS (SELECT 1 FROM webhook_endpoints WHERE enabled)"


def fanned_out_at_sql(now: str) -> str:
    """The SQL value of a new outbox event's ``fanned_out_at``; ``now`` is the SQL of the
    event's ``created_at``."""
    return f"CASE WHEN {ANY_ENABLED_ENDPOINT_SQL} THEN NULL ELSE {now} END"


#: One row per (event, endpoint): the unit that is retried and dead-lettered. An attempt
#: in flight holds a lease (``leased_until``), so a dispatcher killed mid-send loses
#: nothing: when the lease lapses another dispatcher sends again, same ``event_id``.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column(
        "endpoint_id",
        Uuid(as_uuid=True),
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event_id", Uuid(as_uuid=True), ForeignKey("outbox_events.id"), nullable=False),
    Column("task_id", Uuid(as_uuid=True), nullable=False),
    Column("task_version", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt_count", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("leased_until", UtcDateTime),
    Column("lease_owner", Text),
    Column("last_status_code", Integer),
    Column("last_error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("delivered_at", UtcDateTime),
    Index("uq_webhook_deliveries_endpoint_event", "endpoint_id", "event_id", unique=True),
    Index(
        "ix_webhook_deliveries_due",
        "next_attempt_at",
        postgresql_where=text("status = 'PENDING'"),
        sqlite_where=text("status = 'PENDING'"),
    ),
    Index("ix_webhook_deliveries_task", "task_id", "endpoint_id", "task_version"),
    # The claim's order check: is an earlier event of this task still pending for this
    # endpoint? One probe per candidate, whatever the backlog or the history.
    Index(
        "ix_webhook_deliveries_pending_order",
        "endpoint_id",
        "task_id",
        "task_version",
        postgresql_where=text("status = 'PENDING'"),
        sqlite_where=text("status = 'PENDING'"),
    ),
    # Retention finds the oldest finished deliveries without reading the pending ones.
    Index(
        "ix_webhook_deliveries_finished",
        "status",
        "updated_at",
        postgresql_where=text("status <> 'PENDING'"),
        sqlite_where=text("status <> 'PENDING'"),
    ),
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column(
        "delivery_id",
        Uuid(as_uuid=True),
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempt", Integer, nullable=False),
    Column("attempted_at", UtcDateTime, nullable=False),
    Column("status_code", Integer),
    Column("latency_ms", Integer, nullable=False),
    Column("error", Text),
    Column("response_body", Text),
    Index("ix_delivery_attempts_delivery", "delivery_id", "id"),
)


#: The catch-up read's horizon per producer: the last position (in the read's order) of an
#: event of its tasks that retention removed. A cursor before it has lost events.
catchup_horizons = Table(
    "catchup_horizons",
    metadata,
    Column("producer_id", Text, primary_key=True),
    #: SQLite: the outbox rowid; PostgreSQL: the writing transaction's id.
    Column("position", BigInteger, nullable=False),
    Column("created_at", UtcDateTime),
    Column("event_id", Uuid(as_uuid=True)),
    Column("updated_at", UtcDateTime, nullable=False),
)
