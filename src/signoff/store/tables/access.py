"""Who calls in: API keys, console users, their sessions, set-password links and sign-in
throttling."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)

from signoff.store.tables.columns import JsonText, UtcDateTime, metadata

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("role", String(32), nullable=False),
    Column("principal_id", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime),
    Column("groups", JsonText),
    Column("email", Text),
)


# People who sign in to the console. A user ends in the same Principal an API
# key does: ``users.id`` plays the part of the key id.
users = Table(
    "users",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("principal_id", Text, nullable=False, unique=True),
    Column("role", String(32), nullable=False),
    Column("groups", JsonText, nullable=False),
    Column("email", Text),
    Column("password_hash", Text),
    Column("source", String(16), nullable=False),
    Column("disabled_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    # The identity provider's account this user signs in as (single sign-on): the
    # issuer and its stable subject, never a name the provider lets people choose.
    Column("oidc_issuer", Text),
    Column("oidc_subject", Text),
    # How the person hears of work: each event, a digest every interval, or none
    # (signoff.domain.notify_choice).
    Column("notify", String(16), nullable=False, server_default="each"),
    Index("ix_users_email", "email"),
    UniqueConstraint("oidc_issuer", "oidc_subject"),
)

#: Console sessions, server-side: the cookie carries the id, only its SHA-256 is stored.
user_sessions = Table(
    "user_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("user_id", Uuid(as_uuid=True), ForeignKey("users.id"), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Index("ix_user_sessions_user", "user_id"),
)

#: One-time set-password links (SHA-256 of the token; valid 24 h).
password_tokens = Table(
    "password_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("user_id", Uuid(as_uuid=True), ForeignKey("users.id"), nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("used_at", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_password_tokens_user", "user_id"),
)

#: Sign-in attempts per throttling scope (an account from one address, an address) in
#: the current window. An attempt is counted before its password is checked.
login_attempts = Table(
    "login_attempts",
    metadata,
    Column("scope", Text, primary_key=True),
    Column("window_started_at", UtcDateTime, nullable=False),
    Column("attempts", Integer, nullable=False),
)
