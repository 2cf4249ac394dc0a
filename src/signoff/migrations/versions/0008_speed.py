"""Speed: an index for the claim limit; on PostgreSQL, the function that counts a
principal's live leases under a per-principal lock.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Called from the claim statements (signoff.store.oneshot). VOLATILE and PL/pgSQL on
#: purpose: it takes the principal's transaction-scoped advisory lock first, and its
#: count then runs with a fresh snapshot, so it sees the claims committed by whoever held
#: the lock before (a plain CTE would count with the snapshot taken before the wait).
LIVE_LEASES = """
CREATE FUNCTION signoff_live_leases(principal text, at timestamptz, exclude uuid)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('signoff.leases:' || principal, 0));
  RETURN (
    SELECT count(*) FROM review_tasks
    WHERE status = 'CLAIMED' AND claimed_by = principal AND lease_expires_at > at
      AND (exclude IS NULL OR id <> exclude)
  );
END
$$
"""


def upgrade() -> None:
    op.create_index(
        "ix_review_tasks_held",
        "review_tasks",
        ["claimed_by", "lease_expires_at"],
        unique=False,
        postgresql_where=sa.text("status = 'CLAIMED'"),
        sqlite_where=sa.text("status = 'CLAIMED'"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(LIVE_LEASES)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION signoff_live_leases(text, timestamptz, uuid)")
    op.drop_index(
        "ix_review_tasks_held",
        table_name="review_tasks",
        postgresql_where=sa.text("status = 'CLAIMED'"),
        sqlite_where=sa.text("status = 'CLAIMED'"),
    )
