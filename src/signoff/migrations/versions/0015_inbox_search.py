"""The console inbox at scale: each task keeps its first deadline (``due_at``, which the
escalation levels never move) and the text its search matches (``search_text``); indexes
for the "Due soon", "Overdue" and "Decided" views; on PostgreSQL a trigram index
(``pg_trgm``) for the search, and the group function of escalations that writes the two
new columns (``signoff_escalate_group_0015``, defined in the ``.sql`` file beside this
one; the one of 0011 is dropped, and put back on downgrade).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE = sa.text("status IN ('PENDING_REVIEW', 'CLAIMED')")
RESOLVED = sa.text("status = 'RESOLVED'")
OLD_FUNCTION = "signoff_escalate_group_0011(jsonb, text)"
NEW_FUNCTION = "signoff_escalate_group_0015(jsonb, text)"
HERE = Path(__file__).parent


def _first_deadline(deadline_at: Any, level: int, policy: str | None) -> Any:
    """The deadline before the levels moved it: each level fired added the next level's
    ``after_seconds``."""
    if deadline_at is None or not level or not policy:
        return deadline_at
    levels = json.loads(policy).get("levels") or []
    moved = sum(int(step.get("after_seconds", 0)) for step in levels[1 : level + 1])
    return deadline_at - timedelta(seconds=moved)


def _search_text(row: Any) -> str:
    parts = [row.entity_type, row.entity_id, row.reason_code]
    summary = json.loads(row.summary) if row.summary else None
    if isinstance(summary, dict):
        for name in ("recommendation", "rationale"):
            if isinstance(summary.get(name), str):
                parts.append(summary[name])
        if isinstance(summary.get("risks"), list):
            parts += [risk for risk in summary["risks"] if isinstance(risk, str)]
    return " ".join(parts).lower()


def _backfill(bind: sa.Connection) -> None:
    tasks = sa.table(
        "review_tasks",
        sa.column("id"),
        sa.column("due_at", sa.DateTime(timezone=True)),
        sa.column("search_text"),
    )
    op.execute(
        "UPDATE review_tasks SET due_at = deadline_at,"
        " search_text = lower(entity_type || ' ' || entity_id || ' ' || reason_code)"
    )
    moved = bind.execute(
        sa.text(
            "SELECT id, deadline_at, escalation_level, escalation_policy FROM review_tasks"
            " WHERE escalation_level > 0 AND deadline_at IS NOT NULL"
        ).columns(deadline_at=sa.DateTime(timezone=True))
    ).fetchall()
    for row in moved:
        first = _first_deadline(row.deadline_at, row.escalation_level, row.escalation_policy)
        bind.execute(sa.update(tasks).where(tasks.c.id == row.id).values(due_at=first))
    summarised = bind.execute(
        sa.text(
            "SELECT id, entity_type, entity_id, reason_code, summary FROM review_tasks"
            " WHERE summary IS NOT NULL"
        )
    ).fetchall()
    for row in summarised:
        bind.execute(
            sa.update(tasks).where(tasks.c.id == row.id).values(search_text=_search_text(row))
        )


def upgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table("review_tasks") as batch_op:
        batch_op.add_column(sa.Column("due_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("search_text", sa.Text(), nullable=True))
    _backfill(bind)
    op.create_index(
        "ix_review_tasks_due",
        "review_tasks",
        ["due_at", "id"],
        postgresql_where=ACTIVE,
        sqlite_where=ACTIVE,
    )
    op.create_index(
        "ix_review_tasks_decided",
        "review_tasks",
        ["operator_id", "resolved_at", "id"],
        postgresql_where=RESOLVED,
        sqlite_where=RESOLVED,
    )
    if bind.dialect.name == "postgresql":
        # pg_trgm ships with PostgreSQL and is a trusted extension: a role that may
        # create in the database installs it.
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.create_index(
            "ix_review_tasks_search",
            "review_tasks",
            ["search_text"],
            postgresql_using="gin",
            postgresql_ops={"search_text": "gin_trgm_ops"},
        )
        op.execute(f"DROP FUNCTION IF EXISTS {OLD_FUNCTION}")
        op.execute((HERE / "0015_inbox_search.sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {NEW_FUNCTION}")
        op.execute((HERE / "0011_escalation_group_function.sql").read_text(encoding="utf-8"))
        op.drop_index("ix_review_tasks_search", table_name="review_tasks")
    op.drop_index("ix_review_tasks_decided", table_name="review_tasks")
    op.drop_index("ix_review_tasks_due", table_name="review_tasks")
    with op.batch_alter_table("review_tasks") as batch_op:
        batch_op.drop_column("search_text")
        batch_op.drop_column("due_at")
