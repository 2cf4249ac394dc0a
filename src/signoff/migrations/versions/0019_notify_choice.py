"""How each person hears of work: each event, a digest every interval, or none; and the
notification outbox's held rows gathered into digests.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(
            sa.Column("notify", sa.String(length=16), nullable=False, server_default="each")
        )
    with op.batch_alter_table("notifications") as batch:
        batch.add_column(sa.Column("digest_id", sa.Uuid(), nullable=True))
    op.create_index(
        "ix_notifications_held",
        "notifications",
        ["principal_id", "next_attempt_at"],
        postgresql_where=sa.text("status = 'HELD'"),
        sqlite_where=sa.text("status = 'HELD'"),
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_held", table_name="notifications")
    with op.batch_alter_table("notifications") as batch:
        batch.drop_column("digest_id")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("notify")
