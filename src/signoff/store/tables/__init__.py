"""The declared schema. Alembic migrations must produce exactly this (a test compares).

JSON documents are stored as text we serialise ourselves (:class:`JsonText`) rather than
``JSONB``: PostgreSQL's ``jsonb`` cannot hold ``\\u0000``, which is valid JSON that the
escalation contract accepts, and text keeps both engines byte-identical.

The tables are declared by subject (``tasks``, ``delivery``, ``deciding``, ``access``,
``chat``) on
one :data:`metadata` (``columns``); every name is importable from here.
"""

from signoff.store.tables.access import (
    api_keys,
    login_attempts,
    password_tokens,
    user_sessions,
    users,
)
from signoff.store.tables.chat import chat_actions, chat_cards, chat_cursors, chat_deliveries
from signoff.store.tables.columns import JsonText, UtcDateTime, metadata
from signoff.store.tables.deciding import (
    approval_grants,
    approval_rules,
    escalation_policies,
    notifications,
    resume_tokens,
    task_votes,
)
from signoff.store.tables.delivery import (
    ANY_ENABLED_ENDPOINT_SQL,
    catchup_horizons,
    delivery_attempts,
    fanned_out_at_sql,
    outbox_events,
    webhook_deliveries,
    webhook_endpoints,
)
from signoff.store.tables.evidence import checkpoints, receipts, signing_keys
from signoff.store.tables.tasks import (
    idempotency_keys,
    review_tasks,
    revision_views,
    revoked_sources,
    subject_revisions,
    task_actions,
    task_events,
)

__all__ = [
    "ANY_ENABLED_ENDPOINT_SQL",
    "JsonText",
    "UtcDateTime",
    "api_keys",
    "approval_grants",
    "approval_rules",
    "catchup_horizons",
    "chat_actions",
    "chat_cards",
    "chat_cursors",
    "chat_deliveries",
    "checkpoints",
    "delivery_attempts",
    "escalation_policies",
    "fanned_out_at_sql",
    "idempotency_keys",
    "login_attempts",
    "metadata",
    "notifications",
    "outbox_events",
    "password_tokens",
    "receipts",
    "resume_tokens",
    "review_tasks",
    "revision_views",
    "revoked_sources",
    "signing_keys",
    "subject_revisions",
    "task_actions",
    "task_events",
    "task_votes",
    "user_sessions",
    "users",
    "webhook_deliveries",
    "webhook_endpoints",
]
