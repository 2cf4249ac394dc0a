"""``client.events_since(cursor)``: the events of the caller's tasks since a cursor, every
page read, and the cursor to start from next time (reconcile at start)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signoff.client._ops import Call, Op

__all__ = ["EventsSince", "events_since"]


@dataclass(frozen=True)
class EventsSince:
    """The events since the cursor, oldest first: the documents the producer's webhook
    endpoints receive (``{"id", "type", "created_at", "data"}``). Store ``cursor`` once
    they are handled, and pass it next time."""

    events: list[dict[str, Any]]
    cursor: str | None


def events_since(cursor: str | None, page_size: int) -> Op[EventsSince]:
    events: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"limit": page_size}
        if cursor:
            params["cursor"] = cursor
        response = yield Call("GET", "/events", params=params, retry=True)
        page = response.json()
        events += page["items"]
        cursor = page["next_cursor"]
        if not page["has_more"] or not page["items"]:
            return EventsSince(events=events, cursor=cursor)
