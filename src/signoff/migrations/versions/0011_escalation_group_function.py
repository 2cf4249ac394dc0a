"""Speed: on PostgreSQL, the function that writes a group of escalations
(signoff.store.runtime.grouped), created here rather than by the running service.

Its definition is in the ``.sql`` file of the same name beside this one: the text as it
was at this revision, never edited afterwards (a change of the escalation statement is a
new revision with a function of its own name). It is kept as SQL, not a Python literal,
so it reads and diffs as the PL/pgSQL it is, and a later revision can read it by name to
restore this function on its downgrade.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTION = "signoff_escalate_group_0011(jsonb, text)"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(Path(__file__).with_suffix(".sql").read_text(encoding="utf-8"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION {FUNCTION}")
