"""The catch-up read: outbox events remember the transaction that wrote them (PostgreSQL).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The writing transaction's id, set by every insert whatever its statement.
XID_DEFAULT = "(pg_current_xact_id()::text)::bigint"


def upgrade() -> None:
    op.add_column("outbox_events", sa.Column("commit_xid", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE outbox_events SET commit_xid = 0")  # all written before this
        op.execute(f"ALTER TABLE outbox_events ALTER COLUMN commit_xid SET DEFAULT {XID_DEFAULT}")
    op.create_index("ix_outbox_events_commit_xid", "outbox_events", ["commit_xid"])


def downgrade() -> None:
    op.drop_index("ix_outbox_events_commit_xid", table_name="outbox_events")
    op.drop_column("outbox_events", "commit_xid")
