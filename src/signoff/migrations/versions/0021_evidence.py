"""Evidence: the trail's hash chain (``task_events.prev_hash``/``hash``, set by a trigger in
the transaction that writes each record, on both engines), the server's signing keys,
signed receipts and signed checkpoints.

PostgreSQL computes the hash in the trigger function ``signoff_trail_link`` (in the
``.sql`` file beside this one); SQLite's trigger calls ``signoff_trail_hash``, which every
Signoff connection registers (``signoff.store.runtime.database``). Records written before
this migration are linked here.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from signoff.domain.evidence import time_text, trail_hash

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HERE = Path(__file__).parent

#: SQLite's link: the previous hash of the task's records, then the function of the same
#: name as PostgreSQL's, registered on every Signoff connection.
SQLITE_TRIGGER = """
CREATE TRIGGER task_events_link AFTER INSERT ON task_events BEGIN
  UPDATE task_events SET
    prev_hash = (SELECT coalesce((SELECT p.hash FROM task_events p
      WHERE p.task_id = NEW.task_id AND p.id < NEW.id ORDER BY p.id DESC LIMIT 1), '')),
    hash = signoff_trail_hash((SELECT coalesce((SELECT p.hash FROM task_events p
      WHERE p.task_id = NEW.task_id AND p.id < NEW.id ORDER BY p.id DESC LIMIT 1), '')), NEW.task_id, NEW.event_type, NEW.action, NEW.status,
      NEW.version, NEW.actor_id, NEW.actor_role, NEW.created_at, NEW.details)
  WHERE id = NEW.id;
END
"""


def _moment(value: object) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


def _link_existing() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, task_id, event_type, action, status, version, actor_id, actor_role,"
            " created_at, details FROM task_events ORDER BY task_id, id"
        )
    ).all()
    heads: dict[str, str] = {}
    for row in rows:
        task_id = str(row.task_id)
        canonical_id = task_id if "-" in task_id else str(uuid.UUID(task_id))
        prev = heads.get(task_id, "")
        own = trail_hash(
            prev,
            canonical_id,
            row.event_type,
            row.action,
            row.status,
            row.version,
            row.actor_id,
            row.actor_role,
            time_text(_moment(row.created_at)),
            row.details,
        )
        bind.execute(
            sa.text("UPDATE task_events SET prev_hash = :p, hash = :h WHERE id = :id"),
            {"p": prev, "h": own, "id": row.id},
        )
        heads[task_id] = own


def upgrade() -> None:
    with op.batch_alter_table("task_events") as batch:
        batch.add_column(sa.Column("prev_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("hash", sa.String(length=64), nullable=True))
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("private_key", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
    )
    op.create_index(
        "uq_signing_keys_active",
        "signing_keys",
        [sa.text("(retired_at IS NULL)")],
        unique=True,
        postgresql_where=sa.text("retired_at IS NULL"),
        sqlite_where=sa.text("retired_at IS NULL"),
    )
    op.create_table(
        "receipts",
        sa.Column("record_id", sa.BigInteger(), nullable=False),
        sa.Column("task_id", sa.Uuid(), nullable=False),
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("jws", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["record_id"], ["task_events.id"], name=op.f("fk_receipts_record_id_task_events")
        ),
        sa.PrimaryKeyConstraint("record_id", name=op.f("pk_receipts")),
    )
    op.create_index("ix_receipts_task_id", "receipts", ["task_id"])
    op.create_table(
        "checkpoints",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("first_record_id", sa.BigInteger(), nullable=False),
        sa.Column("last_record_id", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("root", sa.String(length=64), nullable=False),
        sa.Column("prev_root", sa.String(length=64), nullable=False),
        sa.Column("made_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("jws", sa.Text(), nullable=False),
        sa.Column("leaves", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_checkpoints")),
    )
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(
            sa.Column(
                "asymmetric_signature", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )
    _link_existing()
    if op.get_bind().dialect.name == "postgresql":
        script = (HERE / "0021_evidence.sql").read_text(encoding="utf-8")
        for sql in script.split("-- next statement\n"):
            op.execute(sql)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER task_events_link ON task_events")
        op.execute("DROP FUNCTION signoff_trail_link()")
    else:
        op.execute("DROP TRIGGER task_events_link")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("asymmetric_signature")
    op.drop_table("checkpoints")
    op.drop_index("ix_receipts_task_id", table_name="receipts")
    op.drop_table("receipts")
    op.drop_index("uq_signing_keys_active", table_name="signing_keys")
    op.drop_table("signing_keys")
    with op.batch_alter_table("task_events") as batch:
        batch.drop_column("hash")
        batch.drop_column("prev_hash")
