"""Durable waiting: deadlines, escalation policies, groups, resume tokens,
notifications.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "escalation_policies",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("levels", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_escalation_policies")),
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("principal_id", sa.Text(), nullable=False),
        sa.Column("email", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("leased_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name=op.f("fk_notifications_task_id_review_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(
            "ix_notifications_due",
            ["next_attempt_at"],
            unique=False,
            postgresql_where=sa.text("status = 'PENDING'"),
            sqlite_where=sa.text("status = 'PENDING'"),
        )

    op.create_table(
        "resume_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("principal_id", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name=op.f("fk_resume_tokens_task_id_review_tasks")
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_resume_tokens")),
    )
    with op.batch_alter_table("resume_tokens", schema=None) as batch_op:
        batch_op.create_index("ix_resume_tokens_task", ["task_id"], unique=False)

    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("groups", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("email", sa.Text(), nullable=True))

    with op.batch_alter_table("review_tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("escalation_level", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("escalation_policy", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("assigned_group", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("summary", sa.Text(), nullable=True))
        batch_op.create_index(
            "ix_review_tasks_deadline",
            ["deadline_at"],
            unique=False,
            postgresql_where=sa.text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
            sqlite_where=sa.text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
        )


def downgrade() -> None:
    with op.batch_alter_table("review_tasks", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_review_tasks_deadline",
            postgresql_where=sa.text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
            sqlite_where=sa.text("status IN ('PENDING_REVIEW', 'CLAIMED')"),
        )
        batch_op.drop_column("summary")
        batch_op.drop_column("assigned_group")
        batch_op.drop_column("escalation_policy")
        batch_op.drop_column("escalation_level")
        batch_op.drop_column("deadline_at")

    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("email")
        batch_op.drop_column("groups")

    with op.batch_alter_table("resume_tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_resume_tokens_task")

    op.drop_table("resume_tokens")
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_notifications_due",
            postgresql_where=sa.text("status = 'PENDING'"),
            sqlite_where=sa.text("status = 'PENDING'"),
        )

    op.drop_table("notifications")
    op.drop_table("escalation_policies")
