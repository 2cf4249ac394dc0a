"""Chat doors (Slack): which message shows which task, and who in chat did what as whom."""

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
    UniqueConstraint,
    Uuid,
)

from signoff.store.tables.columns import UtcDateTime, metadata

#: A card posted to chat: the message (``channel``, ``ts``) that shows a task, and the
#: revision it was last drawn for ("changed since this card was last posted").
chat_cards = Table(
    "chat_cards",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("door", String(16), nullable=False),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("channel", Text, nullable=False),
    Column("ts", Text, nullable=False),
    Column("revision", Integer),
    Column("posted_at", UtcDateTime, nullable=False),
    Column("drawn_at", UtcDateTime, nullable=False),
    UniqueConstraint("door", "channel", "ts"),
    Index("ix_chat_cards_task_id", "task_id"),
)

#: Every decision or vote asked for from a chat door: the chat user behind the Signoff
#: person, what they asked, on which revision, and what came of it (the trail records the
#: person; this records which chat account acted as them).
chat_actions = Table(
    "chat_actions",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("door", String(16), nullable=False),
    Column("chat_user", Text, nullable=False),
    Column("principal_id", Text),
    Column("task_id", Uuid(as_uuid=True), nullable=False),
    Column("decision", String(32), nullable=False),
    Column("revision", Integer),
    Column("outcome", String(64), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("ix_chat_actions_task_id", "task_id", "id"),
)

#: What a chat door still has to show: a card to post for a new task (``kind`` post, to
#: ``channel``), a direct message to a voter (``kind`` dm, ``channel`` their principal
#: id), or a card to draw again after a change (``kind`` redraw, of the message
#: ``channel``/``ts``). Status PENDING, DONE, or SKIPPED (the person has no chat account).
#: Made from the outbox in the transaction that moves the door's cursor, so nothing is
#: lost or made twice across a restart; retried until done, no sooner than the chat
#: system's ``Retry-After``. ``attempted_at``: when a post (a card, a direct message, a
#: notice) was sent without its answer being recorded yet — a retry looks in the channel
#: for the message that attempt may have posted before posting again.
chat_deliveries = Table(
    "chat_deliveries",
    metadata,
    Column("id", Uuid(as_uuid=True), primary_key=True),
    Column("door", String(16), nullable=False),
    Column("task_id", Uuid(as_uuid=True), ForeignKey("review_tasks.id"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("channel", Text, nullable=False),
    Column("ts", Text),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("last_error", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("done_at", UtcDateTime),
    Column("attempted_at", UtcDateTime),
    Index("ix_chat_deliveries_due", "door", "status", "next_attempt_at"),
)

#: How far each chat door has read the outbox (a catch-up position, as
#: :class:`signoff.store.catchup.Position`).
chat_cursors = Table(
    "chat_cursors",
    metadata,
    Column("door", String(16), primary_key=True),
    Column("position", BigInteger),
    Column("created_at", UtcDateTime),
    Column("event_id", Uuid(as_uuid=True)),
    Column("updated_at", UtcDateTime, nullable=False),
)
