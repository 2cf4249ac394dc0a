"""The catch-up read's horizon: per producer, the last position of an event retention
removed, so a cursor before it is answered ``ERR_CURSOR_EXPIRED`` instead of skipping.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "catchup_horizons",
        sa.Column("producer_id", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("event_id", sa.Uuid(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("producer_id", name="pk_catchup_horizons"),
    )


def downgrade() -> None:
    op.drop_table("catchup_horizons")
