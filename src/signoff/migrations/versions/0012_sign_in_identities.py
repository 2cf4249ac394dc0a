"""Sign-in: attempts counted per scope before the password is checked (one row per
scope and window, replacing the list of failures), and single sign-on accounts keyed on
the identity provider's issuer and subject.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "login_attempts",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("window_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name=op.f("pk_login_attempts")),
    )
    op.drop_index("ix_login_failures_scope", table_name="login_failures")
    op.drop_table("login_failures")
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("oidc_issuer", sa.Text(), nullable=True))
        batch.add_column(sa.Column("oidc_subject", sa.Text(), nullable=True))
        batch.create_unique_constraint(
            op.f("uq_users_oidc_issuer_oidc_subject"), ["oidc_issuer", "oidc_subject"]
        )


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint(op.f("uq_users_oidc_issuer_oidc_subject"), type_="unique")
        batch.drop_column("oidc_subject")
        batch.drop_column("oidc_issuer")
    op.create_table(
        "login_failures",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
    )
    op.create_index(
        "ix_login_failures_scope", "login_failures", ["scope", "failed_at"], unique=False
    )
    op.drop_table("login_attempts")
