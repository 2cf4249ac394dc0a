"""How a task is decided and waited for: escalation policies, approval rules, votes,
resume links and the notification outbox."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    Uuid,
    text,
)

from signoff.store.tables.columns import JsonText, UtcDateTime, metadata

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
    # A person who chose a digest: their notifications wait ``HELD`` until
    # ``next_attempt_at`` (the end of the digest's interval), then are gathered into one
    # ``digest`` row (named by ``digest_id``; its ``task_id`` is its first task) and
    # become ``DIGESTED``.
    Column("digest_id", Uuid(as_uuid=True)),
    Index(
        "ix_notifications_held",
        "principal_id",
        "next_attempt_at",
        postgresql_where=text("status = 'HELD'"),
        sqlite_where=text("status = 'HELD'"),
    ),
    Index(
        "ix_notifications_due",
        "next_attempt_at",
        postgresql_where=text("status = 'PENDING'"),
        sqlite_where=text("status = 'PENDING'"),
    ),
)

#: Remembered approvals: a reviewer (when approving) or an admin allows the same action
#: again for a while. An escalation with a subject looks up the live grants of its
#: producer, entity type and reason in one indexed read; a match approves it at once.
approval_grants = Table(
    "approval_grants",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("producer_id", Text, nullable=False),
    Column("entity_type", Text, nullable=False),
    Column("reason_code", Text, nullable=False),
    Column("digest", String(64)),
    Column("conditions", JsonText),
    Column("created_by", Text, nullable=False),
    Column("created_by_key_id", Uuid(as_uuid=True)),
    Column("source_task_id", Uuid(as_uuid=True)),
    Column("note", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime),
    Column("revoked_by", Text),
    Column("uses", Integer, nullable=False, server_default="0"),
    Index(
        "ix_approval_grants_live",
        "producer_id",
        "entity_type",
        "reason_code",
        postgresql_where=text("revoked_at IS NULL"),
        sqlite_where=text("revoked_at IS NULL"),
    ),
)
