"""Producers' side: correlation metadata, trace context, execution leases, precise
refusals; outbox notifications name their task (long-poll waiters wake on them).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LEASED = "execution_token_hash IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("review_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("producer_metadata", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("traceparent", sa.String(length=55), nullable=True))
        batch_op.add_column(sa.Column("execution_token_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("execution_lease_expires_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("execution_stalled_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("invalidated_revision", sa.Integer(), nullable=True))
        batch_op.create_index(
            "ix_review_tasks_execution_lease",
            ["execution_lease_expires_at"],
            unique=False,
            postgresql_where=sa.text(_LEASED),
            sqlite_where=sa.text(_LEASED),
        )
    if op.get_bind().dialect.name == "postgresql":
        # One notification per outbox row, naming its task: the dispatcher ignores the
        # payload, long-poll waiters of that task wake on it.
        op.execute(
            "CREATE OR REPLACE FUNCTION signoff_notify_outbox() RETURNS trigger "
            "LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_notify('signoff_outbox', NEW.task_id::text); "
            "RETURN NULL; END $$"
        )
        op.execute("DROP TRIGGER IF EXISTS outbox_events_notify ON outbox_events")
        op.execute(
            "CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events "
            "FOR EACH ROW EXECUTE FUNCTION signoff_notify_outbox()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS outbox_events_notify ON outbox_events")
        op.execute(
            "CREATE OR REPLACE FUNCTION signoff_notify_outbox() RETURNS trigger "
            "LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_notify('signoff_outbox', ''); RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events "
            "FOR EACH STATEMENT EXECUTE FUNCTION signoff_notify_outbox()"
        )
    with op.batch_alter_table("review_tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_review_tasks_execution_lease",
            postgresql_where=sa.text(_LEASED),
            sqlite_where=sa.text(_LEASED),
        )
        for column in (
            "invalidated_revision",
            "execution_stalled_at",
            "execution_lease_expires_at",
            "execution_token_hash",
            "traceparent",
            "producer_metadata",
        ):
            batch_op.drop_column(column)
