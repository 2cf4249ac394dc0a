"""Evidence: the server's signing keys, the signed receipts of trail records and the
signed checkpoints over them (the chain link itself is on ``task_events``)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    Uuid,
    text,
)

from signoff.store.tables.columns import JsonText, UtcDateTime, metadata

#: Ed25519 keys: ``public_key`` base64url (32 bytes), ``private_key`` encrypted at rest
#: (signoff.crypto), emptied when the key is retired; public keys are kept for ever.
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("kid", String(64), primary_key=True),
    Column("public_key", Text, nullable=False),
    Column("private_key", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("retired_at", UtcDateTime),
    # At most one live key: two processes starting at once cannot both make one.
    Index(
        "uq_signing_keys_active",
        text("(retired_at IS NULL)"),
        unique=True,
        postgresql_where=text("retired_at IS NULL"),
        sqlite_where=text("retired_at IS NULL"),
    ),
)

#: One compact JWS per trail record.
receipts = Table(
    "receipts",
    metadata,
    Column("record_id", BigInteger, ForeignKey("task_events.id"), primary_key=True),
    Column("task_id", Uuid(as_uuid=True), nullable=False, index=True),
    Column("kid", String(64), nullable=False),
    Column("jws", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)

#: A signed Merkle root over the records of ids ``first..last``, chained by root.
checkpoints = Table(
    "checkpoints",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("first_record_id", BigInteger, nullable=False),
    Column("last_record_id", BigInteger, nullable=False),
    Column("size", Integer, nullable=False),
    Column("root", String(64), nullable=False),
    Column("prev_root", String(64), nullable=False),
    Column("made_at", UtcDateTime, nullable=False),
    Column("kid", String(64), nullable=False),
    Column("jws", Text, nullable=False),
    # The certified leaves (signoff.domain.evidence.leaf), so a lost record is named.
    Column("leaves", JsonText, nullable=False),
)
