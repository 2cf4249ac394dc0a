"""Approval by several people: approval rules, votes bound to revisions.

Revision ID: 0016
Revises: 0014
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("review_tasks", sa.Column("approval_rule", sa.Text(), nullable=True))
    op.add_column("review_tasks", sa.Column("requested_by", sa.Text(), nullable=True))
    op.add_column("review_tasks", sa.Column("votes", sa.Text(), nullable=True))
    op.create_table(
        "approval_rules",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_approval_rules"),
    )
    op.create_table(
        "task_votes",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("voter", sa.Text(), nullable=False),
        sa.Column("voter_key_id", sa.Uuid(), nullable=False),
        sa.Column("decision", sa.String(32), nullable=False),
        sa.Column("notes", sa.Text()),
        sa.Column("revision", sa.Integer()),
        sa.Column("digest", sa.String(64)),
        sa.Column("door", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("voided_at", sa.DateTime(timezone=True)),
        sa.Column("void_reason", sa.Text()),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name="fk_task_votes_task_id_review_tasks"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_task_votes"),
    )
    op.create_index(
        "uq_task_votes_live",
        "task_votes",
        ["task_id", "stage", "voter"],
        unique=True,
        postgresql_where=sa.text("voided_at IS NULL"),
        sqlite_where=sa.text("voided_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_task_votes_live", table_name="task_votes")
    op.drop_table("task_votes")
    op.drop_table("approval_rules")
    with op.batch_alter_table("review_tasks") as batch:
        batch.drop_column("votes")
        batch.drop_column("requested_by")
        batch.drop_column("approval_rule")
