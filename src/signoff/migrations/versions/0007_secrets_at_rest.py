"""Secrets at rest and producer-scoped webhook subscriptions: webhook signing secrets
encrypted, resume links taken out of stored e-mail bodies (the token of an unsent one
kept encrypted), and the owner of a producer's webhook endpoint.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from signoff.crypto import Keyring

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Must equal signoff.services.waiting.LINK_PLACEHOLDER (kept literal: migrations are frozen).
LINK_PLACEHOLDER = "\x1eresume-link\x1e"
LINK = re.compile(r"\S+/r/([A-Za-z0-9_\-]+)")


def _keyring() -> Keyring:
    from signoff.crypto import load_keyring
    from signoff.settings import Settings

    config = op.get_context().config
    given = config.attributes.get("keyring") if config is not None else None
    if callable(given):
        given = given()
    return given if isinstance(given, Keyring) else load_keyring(Settings())


def upgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(sa.Column("producer_id", sa.Text(), nullable=True))
    with op.batch_alter_table("notifications") as batch:
        batch.add_column(sa.Column("resume_token", sa.Text(), nullable=True))

    connection = op.get_bind()
    endpoints = connection.execute(
        sa.text("SELECT id, secret, previous_secret FROM webhook_endpoints")
    ).all()
    keyring: Keyring | None = None
    for row in endpoints:
        keyring = keyring or _keyring()
        values = {
            "id": row.id,
            "secret": keyring.rotate(row.secret),
            "previous": keyring.rotate(row.previous_secret) if row.previous_secret else None,
        }
        connection.execute(
            sa.text(
                "UPDATE webhook_endpoints SET secret = :secret, previous_secret = :previous "
                "WHERE id = :id"
            ),
            values,
        )
    bodies = connection.execute(
        sa.text("SELECT id, body, status FROM notifications WHERE body LIKE '%/r/%'")
    ).all()
    for row in bodies:
        match = LINK.search(row.body)
        if match is None:
            continue
        token = None
        if row.status == "PENDING":
            keyring = keyring or _keyring()
            token = keyring.encrypt(match.group(1))
            body = LINK.sub(lambda _m: LINK_PLACEHOLDER, row.body)
        else:
            body = LINK.sub(lambda _m: "[link removed]", row.body)
        connection.execute(
            sa.text("UPDATE notifications SET body = :body, resume_token = :token WHERE id = :id"),
            {"id": row.id, "body": body, "token": token},
        )


def downgrade() -> None:
    with op.batch_alter_table("notifications") as batch:
        batch.drop_column("resume_token")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("producer_id")
