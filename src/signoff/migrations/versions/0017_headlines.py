"""Headlines: what is being approved, in one line (``review_tasks.headline``, see
:mod:`signoff.domain.headline`); tasks already there get the default headline from their
entity and reason. An escalation policy may hold a default headline
(``escalation_policies.headline``). On PostgreSQL the group function of escalations that writes the new
column (``signoff_escalate_group_0017``, defined in the ``.sql`` file beside this one;
the one of 0016 is dropped, and put back on downgrade).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from signoff.domain.headline import default_headline
from signoff.domain.json_output import compact_json

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_FUNCTION = "signoff_escalate_group_0016(jsonb, text)"
NEW_FUNCTION = "signoff_escalate_group_0017(jsonb, text)"
HERE = Path(__file__).parent


def _backfill(bind: sa.Connection) -> None:
    tasks = sa.table("review_tasks", sa.column("id"), sa.column("headline"))
    rows = bind.execute(
        sa.text("SELECT id, entity_type, entity_id, reason_code FROM review_tasks")
    ).fetchall()
    for row in rows:
        headline = default_headline(row.entity_type, row.entity_id, row.reason_code)
        bind.execute(
            sa.update(tasks).where(tasks.c.id == row.id).values(headline=compact_json(headline))
        )


def upgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table("review_tasks") as batch_op:
        batch_op.add_column(sa.Column("headline", sa.Text(), nullable=True))
    with op.batch_alter_table("escalation_policies") as batch_op:
        batch_op.add_column(sa.Column("headline", sa.Text(), nullable=True))
    _backfill(bind)
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {OLD_FUNCTION}")
        op.execute((HERE / "0017_headlines.sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {NEW_FUNCTION}")
        op.execute((HERE / "0016_approval_votes.sql").read_text(encoding="utf-8"))
    with op.batch_alter_table("escalation_policies") as batch:
        batch.drop_column("headline")
    with op.batch_alter_table("review_tasks") as batch:
        batch.drop_column("headline")
