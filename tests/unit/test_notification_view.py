"""Notifications as GET /tasks/{id}/notifications shows them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from signoff.services.notifications import _notification_view


def row(status: str) -> dict[str, object]:
    moment = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    return {
        "id": uuid.UUID(int=1),
        "status": status,
        "created_at": moment,
        "next_attempt_at": moment,
        "sent_at": moment if status == "SENT" else None,
        "body": "not shown",
        "resume_token": "not shown either",
    }


def test_times_end_in_z_and_the_body_is_not_shown() -> None:
    view = _notification_view(row("PENDING"))
    assert view["created_at"] == "2026-12-01T06:00:00.000000Z"
    assert view["next_attempt_at"] == "2026-12-01T06:00:00.000000Z"
    assert view["id"] == str(uuid.UUID(int=1))
    assert "body" not in view
    assert "resume_token" not in view


def test_no_next_attempt_once_sent_or_dead() -> None:
    assert _notification_view(row("SENT"))["next_attempt_at"] is None
    assert _notification_view(row("SENT"))["sent_at"] == "2026-12-01T06:00:00.000000Z"
    assert _notification_view(row("DEAD"))["next_attempt_at"] is None
