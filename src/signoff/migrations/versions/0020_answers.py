"""Answers beyond yes and no: remembered approvals (``approval_grants``, and the grant
that approved a task, ``review_tasks.grant_id``); what a reviewer may edit before approving
(``review_tasks.editable``, JSON Pointers the producer declared) and the feedback a
decision that asks for changes leaves on the task (``review_tasks.change_request``:
notes, the fields named with their reasons, the revision, who and when; see
:mod:`signoff.domain.change_requests`). On PostgreSQL the group function of escalations
that writes the new columns and shows them in the events (``signoff_escalate_group_0020``,
defined in the ``.sql`` file beside this one; the one of 0017 is dropped, and put back on
downgrade).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_FUNCTION = "signoff_escalate_group_0017(jsonb, text)"
NEW_FUNCTION = "signoff_escalate_group_0020(jsonb, text)"
HERE = Path(__file__).parent


def upgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table("review_tasks") as batch_op:
        batch_op.add_column(sa.Column("editable", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("grant_id", sa.Uuid(), nullable=True))
        batch_op.add_column(sa.Column("change_request", sa.Text(), nullable=True))
    op.create_table(
        "approval_grants",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("producer_id", sa.Text(), nullable=False),
        sa.Column("entity_type", sa.Text(), nullable=False),
        sa.Column("reason_code", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=True),
        sa.Column("conditions", sa.Text(), nullable=True),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("created_by_key_id", sa.Uuid(), nullable=True),
        sa.Column("source_task_id", sa.Uuid(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.Text(), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index(
        "ix_approval_grants_live",
        "approval_grants",
        ["producer_id", "entity_type", "reason_code"],
        postgresql_where=sa.text("revoked_at IS NULL"),
        sqlite_where=sa.text("revoked_at IS NULL"),
    )
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {OLD_FUNCTION}")
        op.execute((HERE / "0020_answers.sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {NEW_FUNCTION}")
        op.execute((HERE / "0017_headlines.sql").read_text(encoding="utf-8"))
    op.drop_index("ix_approval_grants_live", table_name="approval_grants")
    op.drop_table("approval_grants")
    with op.batch_alter_table("review_tasks") as batch_op:
        batch_op.drop_column("change_request")
        batch_op.drop_column("editable")
        batch_op.drop_column("grant_id")
