"""Subjects with revisions, approvals bound to a revision, execution per action.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "revision_views",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("principal_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("viewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name=op.f("fk_revision_views_task_id_review_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "principal_id", name=op.f("pk_revision_views")),
    )
    op.create_table(
        "revoked_sources",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("source_id", sa.Text(), nullable=False),
        sa.Column("revoked_by", sa.Text(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name=op.f("fk_revoked_sources_task_id_review_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "source_id", name=op.f("pk_revoked_sources")),
    )
    op.create_table(
        "subject_revisions",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("source_revisions", sa.Text(), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name=op.f("fk_subject_revisions_task_id_review_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "revision", name=op.f("pk_subject_revisions")),
    )
    op.create_table(
        "task_actions",
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("action_id", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("operation_id", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name=op.f("fk_task_actions_task_id_review_tasks")
        ),
        sa.PrimaryKeyConstraint("task_id", "action_id", name=op.f("pk_task_actions")),
    )
    op.add_column("review_tasks", sa.Column("current_revision", sa.Integer(), nullable=True))
    op.add_column("review_tasks", sa.Column("digest", sa.String(length=64), nullable=True))
    op.add_column("review_tasks", sa.Column("material_paths", sa.Text(), nullable=True))
    op.add_column("review_tasks", sa.Column("approval_ttl_seconds", sa.Integer(), nullable=True))
    op.add_column("review_tasks", sa.Column("approved_revision", sa.Integer(), nullable=True))
    op.add_column("review_tasks", sa.Column("approved_digest", sa.String(length=64), nullable=True))
    op.add_column(
        "review_tasks", sa.Column("approval_expires_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("review_tasks", sa.Column("approver_key_id", sa.Uuid(), nullable=True))
    op.add_column(
        "review_tasks", sa.Column("execution_status", sa.String(length=16), nullable=True)
    )
    op.add_column("review_tasks", sa.Column("execution_operation_id", sa.Text(), nullable=True))
    op.add_column(
        "review_tasks", sa.Column("executed_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    for table in ("revision_views", "task_actions", "revoked_sources", "subject_revisions"):
        op.drop_table(table)
    with op.batch_alter_table("review_tasks") as batch_op:
        for column in (
            "executed_at",
            "execution_operation_id",
            "execution_status",
            "approver_key_id",
            "approval_expires_at",
            "approved_digest",
            "approved_revision",
            "approval_ttl_seconds",
            "material_paths",
            "digest",
            "current_revision",
        ):
            batch_op.drop_column(column)
