"""The declared schema. Alembic migrations must produce exactly this (a test compares).

JSON documents are stored as text we serialise ourselves (:class:`JsonText`) rather than
``JSONB``: PostgreSQL's ``jsonb`` cannot hold ``\\u0000``, which is valid JSON that the
escalation contract accepts, and text keeps both engines byte-identical.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.types import TypeDecorator

from signoff.domain.json_output import compact_json

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(TypeDecorator[datetime]):
    """``timestamptz`` on PostgreSQL; on SQLite, naive UTC text with microseconds (which
    sorts and compares correctly as text). Only timezone-aware values are accepted."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class JsonText(TypeDecorator[Any]):
    """A JSON value stored as compact text. Control characters (including U+0000) are
    escaped by the serialiser, so any value RFC 8259 allows round-trips losslessly."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else compact_json(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


review_tasks = Table(
    "review_tasks",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("status", String(32), nullable=False),
    Column("entity_type", Text, nullable=False),
    Column("entity_id", Text, nullable=False),
    Column("reason_code", Text, nullable=False),
    Column("precheck_hash", String(64), nullable=False),
    Column("diagnostic_bundle", JsonText, nullable=False),
    Column("producer_id", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("claimed_by", Text),
    Column("lease_token_hash", String(64)),
    Column("lease_expires_at", UtcDateTime),
    Column("decision", String(32)),
    Column("notes", Text),
    Column("resolution_payload", JsonText),
    Column("operator_id", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("resolved_at", UtcDateTime),
    # Approvals bound to versions: the subject under review, its current revision and
    # digest, and the approval bound to one revision.
    Column("current_revision", Integer),
    Column("digest", String(64)),
    Column("material_paths", JsonText),
    Column("approval_ttl_seconds", Integer),
    Column("approved_revision", Integer),
    Column("approved_digest", String(64)),
    Column("approval_expires_at", UtcDateTime),
    Column("approver_key_id", Uuid(as_uuid=True)),
    Column("execution_status", String(16)),
    Column("execution_operation_id", Text),
    Column("executed_at", UtcDateTime),
    # Waiting is a stored state with a deadline. ``deadline_at`` is when the next
    # escalation level fires; the policy's levels are copied onto the task at escalation.
    Column("deadline_at", UtcDateTime),
    Column("escalation_level", Integer, nullable=False, server_default="0"),
    Column("escalation_policy", JsonText),
    Column("assigned_group", Text),
    Column("summary", JsonText),
    # Producers' side (agents): the producer's own correlation and trace context, never
    # shown to reviewers; the execution lease that fences an executor; the revision whose
    # approval a new revision invalidated (to name that refusal precisely).
    Column("producer_metadata", JsonText),
    Column("traceparent", String(55)),
    Column("execution_token_hash", String(64)),
    Column("execution_lease_expires_at", UtcDateTime),
    Column("execution_stalled_at", UtcDateTime),
    Column("invalidated_revision", Integer),
    # Approval by several people: the rule copied onto the task at escalation, the person
    # the producer asked on behalf of, and the live votes (each bound to a revision and
    # digest; the votes table keeps every vote, voided ones too).
    Column("approval_rule", JsonText),
    Column("requested_by", Text),
    Column("votes", JsonText),
    # The console inbox: ``due_at`` is the task's first deadline (the producer's
    # ``deadline``, its ``timeout``, else when the policy's first level fires), never moved
    # by the escalation levels; ``search_text`` is what the inbox search matches
    # (:func:`signoff.domain.inbox.search_text`), lower case.
    Column("due_at", UtcDateTime),
    Column("search_text", Text),
    # What is being approved, in one line (:mod:`signoff.domain.headline`): the producer's
    # declaration bound to the current revision, or the default from entity and reason.
    Column("headline", JsonText),
    # One active task per entity, enforced by the database.
    Index(
        "uq_review_tasks_active_entity",
        "entity_type",
        "entity_id",
        unique=True,
        postgresql_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
        sqlite_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
    ),
    # The sweeper looks only at active tasks that have a deadline.
    Index(
        "ix_review_tasks_deadline",
        "deadline_at",
        postgresql_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
        sqlite_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
    ),
    # claim-next walks active tasks oldest first; without this partial index the claim
    # degrades to a scan of every resolved task (DESIGN.md: ~35/s instead of ~4,700/s).
    Index(
        "ix_review_tasks_claimable",
        "created_at",
        "id",
        postgresql_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
        sqlite_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
    ),
    Index("ix_review_tasks_listing", "created_at", "id"),
    # The inbox's "Due soon" and "Overdue" views page through active tasks by due time;
    # "Decided" through a reviewer's decisions, the latest first.
    Index(
        "ix_review_tasks_due",
        "due_at",
        "id",
        postgresql_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
        sqlite_where=text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
    ),
    Index(
        "ix_review_tasks_decided",
        "operator_id",
        "resolved_at",
        "id",
        postgresql_where=text("status = 'RESOLVED'"),
        sqlite_where=text("status = 'RESOLVED'"),
    ),
    Index("ix_review_tasks_producer", "producer_id", "created_at"),
    # The claim limit counts a principal's live leases at every claim.
    Index(
        "ix_review_tasks_held",
        "claimed_by",
        "lease_expires_at",
        postgresql_where=text("status = 'CLAIMED'"),
        sqlite_where=text("status = 'CLAIMED'"),
    ),
    # The sweeper looks for execution leases that lapsed without an outcome.
    Index(
        "ix_review_tasks_execution_lease",
        "execution_lease_expires_at",
        postgresql_where=text("execution_token_hash IS NOT NULL"),
        sqlite_where=text("execution_token_hash IS NOT NULL"),
    ),
)

#: The inbox search (PostgreSQL only): a trigram index answers ``LIKE '%word%'`` on the
#: search text without reading every task (``pg_trgm``, created by migration 0015).
Index(
    "ix_review_tasks_search",
    review_tasks.c.search_text,
    postgresql_using="gin",
    postgresql_ops={"search_text": "gin_trgm_ops"},
).ddl_if(dialect="postgresql")

#: Immutable revisions of a task's subject. Revision 1 comes with the escalation.
subject_revisions = Table(
    "subject_revisions",
    metadata,
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), primary_key=True),
    Column("revision", Integer, primary_key=True),
    Column("subject", JsonText, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("source_revisions", JsonText, nullable=False),
    Column("created_by", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

#: Sources a producer revoked after review; an approval relying on them cannot execute.
revoked_sources = Table(
    "revoked_sources",
    metadata,
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), primary_key=True),
    Column("source_id", Text, primary_key=True),
    Column("revoked_by", Text, nullable=False),
    Column("revoked_at", UtcDateTime, nullable=False),
)

#: Per-action execution status (an article may be published while the
#: newsletter failed; a failed action is retried alone).
task_actions = Table(
    "task_actions",
    metadata,
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), primary_key=True),
    Column("action_id", Text, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("operation_id", Text),
    Column("result", JsonText),
    Column("updated_at", UtcDateTime, nullable=False),
)

#: The last revision each operator viewed, for "what changed since you last looked".
revision_views = Table(
    "revision_views",
    metadata,
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), primary_key=True),
    Column("principal_id", Text, primary_key=True),
    Column("revision", Integer, nullable=False),
    Column("viewed_at", UtcDateTime, nullable=False),
)

#: Idempotency keys live apart from tasks so they can expire (a permanent ``UNIQUE`` on
#: ``review_tasks.idempotency_key`` could not let a key be used again after 24 hours).
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("producer_id", Text, primary_key=True),
    Column("idempotency_key", Text, primary_key=True),
    Column("request_fingerprint", String(64), nullable=False),
    Column("task_id", Uuid(as_uuid=True), nullable=False),
    Column("response_status", Integer, nullable=False),
    Column("response_body", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Index("ix_idempotency_keys_expires_at", "expires_at"),
)

task_events = Table(
    "task_events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("event_type", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("status", String(32), nullable=False),
    Column("version", Integer, nullable=False),
    Column("actor_id", Text, nullable=False),
    Column("actor_role", String(32), nullable=False),
    Column("details", JsonText, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_task_events_task_id", "task_id", "id"),
)

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

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("role", String(32), nullable=False),
    Column("principal_id", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime),
    Column("groups", JsonText),
    Column("email", Text),
)

escalation_policies = Table(
    "escalation_policies",
    metadata,
    Column("name", Text, primary_key=True),
    Column("levels", JsonText, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The headline of tasks escalated under this policy that declare none.
    Column("headline", JsonText),
)

#: Admin-managed approval rules an escalation may name; a task keeps a copy of its rule.
approval_rules = Table(
    "approval_rules",
    metadata,
    Column("name", Text, primary_key=True),
    Column("rule", JsonText, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
)

#: Every vote ever cast on a task with an approval rule. A person has at most one live
#: (not voided) vote per stage of a task: the database refuses a second.
task_votes = Table(
    "task_votes",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("stage", Integer, nullable=False),
    Column("voter", Text, nullable=False),
    Column("voter_key_id", Uuid(as_uuid=True), nullable=False),
    Column("decision", String(32), nullable=False),
    Column("notes", Text),
    Column("revision", Integer),
    Column("digest", String(64)),
    Column("door", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("voided_at", UtcDateTime),
    Column("void_reason", Text),
    Index(
        "uq_task_votes_live",
        "task_id",
        "stage",
        "voter",
        unique=True,
        postgresql_where=text("voided_at IS NULL"),
        sqlite_where=text("voided_at IS NULL"),
    ),
)

#: Resume tokens: single-purpose approve/reject links, bound to one task and
#: one approver, stored as SHA-256.
resume_tokens = Table(
    "resume_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("principal_id", Text, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_resume_tokens_task", "task_id"),
)

#: The notification outbox: written with the change that causes it, sent by the notifier.
notifications = Table(
    "notifications",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("principal_id", Text, nullable=False),
    Column("email", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("leased_until", UtcDateTime),
    Column("last_error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime),
    # No usable link at rest: ``body`` holds a placeholder where the link goes, and the
    # resume token is kept encrypted only until the message is sent or dead.
    Column("resume_token", Text),
    Index(
        "ix_notifications_due",
        "next_attempt_at",
        postgresql_where=text("status = 'PENDING'"),
        sqlite_where=text("status = 'PENDING'"),
    ),
)

# People who sign in to the console. A user ends in the same Principal an API
# key does: ``users.id`` plays the part of the key id.
users = Table(
    "users",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("principal_id", Text, nullable=False, unique=True),
    Column("role", String(32), nullable=False),
    Column("groups", JsonText, nullable=False),
    Column("email", Text),
    Column("password_hash", Text),
    Column("source", String(16), nullable=False),
    Column("disabled_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The identity provider's account this user signs in as (single sign-on): the
    # issuer and its stable subject, never a name the provider lets people choose.
    Column("oidc_issuer", Text),
    Column("oidc_subject", Text),
    Index("ix_users_email", "email"),
    UniqueConstraint("oidc_issuer", "oidc_subject"),
)

#: Console sessions, server-side: the cookie carries the id, only its SHA-256 is stored.
user_sessions = Table(
    "user_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("user_id", Uuid(as_uuid=True), ForeignKey("users.id"), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Index("ix_user_sessions_user", "user_id"),
)

#: One-time set-password links (SHA-256 of the token; valid 24 h).
password_tokens = Table(
    "password_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("user_id", Uuid(as_uuid=True), ForeignKey("users.id"), nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("used_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_password_tokens_user", "user_id"),
)

#: Sign-in attempts per throttling scope (an account from one address, an address) in
#: the current window. An attempt is counted before its password is checked.
login_attempts = Table(
    "login_attempts",
    metadata,
    Column("scope", Text, primary_key=True),
    Column("window_started_at", UtcDateTime, nullable=False),
    Column("attempts", Integer, nullable=False),
)
