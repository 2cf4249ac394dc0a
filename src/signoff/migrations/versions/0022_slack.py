"""Chat doors (Slack): the cards posted for tasks, the chat user behind each decision or
vote asked for in chat, the cards still to post or redraw, and each door's place in the
outbox.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "chat_cards",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("door", sa.String(length=16), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("ts", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=True),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("drawn_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name="fk_chat_cards_task_id_review_tasks"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_chat_cards"),
        sa.UniqueConstraint("door", "channel", "ts", name="uq_chat_cards_door_channel_ts"),
    )
    op.create_index("ix_chat_cards_task_id", "chat_cards", ["task_id"])
    op.create_table(
        "chat_actions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("door", sa.String(length=16), nullable=False),
        sa.Column("chat_user", sa.Text(), nullable=False),
        sa.Column("principal_id", sa.Text(), nullable=True),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("decision", sa.String(length=32), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_actions"),
    )
    op.create_index("ix_chat_actions_task_id", "chat_actions", ["task_id", "id"])
    op.create_table(
        "chat_deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("door", sa.String(length=16), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("ts", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["task_id"], ["review_tasks.id"], name="fk_chat_deliveries_task_id_review_tasks"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_chat_deliveries"),
    )
    op.create_index(
        "ix_chat_deliveries_due", "chat_deliveries", ["door", "status", "next_attempt_at"]
    )
    op.create_table(
        "chat_cursors",
        sa.Column("door", sa.String(length=16), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("event_id", sa.Uuid(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("door", name="pk_chat_cursors"),
    )


def downgrade() -> None:
    op.drop_table("chat_cursors")
    op.drop_index("ix_chat_deliveries_due", table_name="chat_deliveries")
    op.drop_table("chat_deliveries")
    op.drop_index("ix_chat_actions_task_id", table_name="chat_actions")
    op.drop_table("chat_actions")
    op.drop_index("ix_chat_cards_task_id", table_name="chat_cards")
    op.drop_table("chat_cards")
