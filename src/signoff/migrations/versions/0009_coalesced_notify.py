"""Speed: outbox inserts no longer notify inside their transaction; each process
announces what it committed, in batches (signoff.store.runtime.announce).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS outbox_events_notify ON outbox_events")
        op.execute("DROP FUNCTION IF EXISTS signoff_notify_outbox()")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION signoff_notify_outbox() RETURNS trigger "
            "LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_notify('signoff_outbox', NEW.task_id::text); "
            "RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER outbox_events_notify AFTER INSERT ON outbox_events "
            "FOR EACH ROW EXECUTE FUNCTION signoff_notify_outbox()"
        )
