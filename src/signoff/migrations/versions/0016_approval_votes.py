"""Approval by several people: approval rules, votes bound to revisions; on PostgreSQL
the group function of escalations that writes the new columns
(``signoff_escalate_group_0016``, defined in the ``.sql`` file beside this one; the one of
0015 is dropped, and put back on downgrade).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_FUNCTION = "signoff_escalate_group_0015(jsonb, text)"
NEW_FUNCTION = "signoff_escalate_group_0016(jsonb, text)"
HERE = Path(__file__).parent


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
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {OLD_FUNCTION}")
        op.execute((HERE / "0016_approval_votes.sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {NEW_FUNCTION}")
        op.execute((HERE / "0015_inbox_search.sql").read_text(encoding="utf-8"))
    op.drop_index("uq_task_votes_live", table_name="task_votes")
    op.drop_table("task_votes")
    op.drop_table("approval_rules")
    with op.batch_alter_table("review_tasks") as batch:
        batch.drop_column("votes")
        batch.drop_column("requested_by")
        batch.drop_column("approval_rule")
