"""A chat delivery's attempt: when a post was last sent to the chat system without its
answer being recorded (``chat_deliveries.attempted_at``), so that a retry looks for the
message before posting it again.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chat_deliveries") as batch:
        batch.add_column(sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_deliveries") as batch:
        batch.drop_column("attempted_at")
