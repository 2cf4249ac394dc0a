"""The review task and what is kept with it: the subject's revisions, revoked sources, the
actions of an execution, who saw which revision, idempotency keys and the audit trail."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
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
    # What a reviewer may edit before approving: JSON Pointers into the subject.
    Column("editable", JsonText),
    # The remembered approval (``approval_grants``) that approved the task, if one did.
    Column("grant_id", Uuid(as_uuid=True)),
    # The feedback of the last decision that asked for changes (notes, the fields named
    # with their reasons, the revision, who and when), kept until the next decision.
    Column("change_request", JsonText),
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
    # The hash chain (signoff.domain.evidence), set by a trigger in the same transaction.
    Column("prev_hash", String(64)),
    Column("hash", String(64)),
    Index("ix_task_events_task_id", "task_id", "id"),
)
