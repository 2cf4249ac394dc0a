"""Retention: the sweeper finds old finished deliveries and fanned-out outbox events by
index.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_webhook_deliveries_finished",
        "webhook_deliveries",
        ["status", "updated_at"],
        postgresql_where=sa.text("status <> 'PENDING'"),
        sqlite_where=sa.text("status <> 'PENDING'"),
    )
    op.create_index(
        "ix_outbox_events_fanned_out",
        "outbox_events",
        ["created_at"],
        postgresql_where=sa.text("fanned_out_at IS NOT NULL"),
        sqlite_where=sa.text("fanned_out_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_events_fanned_out", table_name="outbox_events")
    op.drop_index("ix_webhook_deliveries_finished", table_name="webhook_deliveries")
