"""Which webhook deliveries the LangGraph receiver
(:class:`signoff.integrations.langgraph.WebhookReceiver`) has handled already, by
``webhook-id``: in memory, or in a SQLite file that survives a restart."""

from __future__ import annotations

import sqlite3
import threading
from typing import Protocol


class Seen(Protocol):
    def add(self, webhook_id: str) -> bool:
        """Record the id; False when it was there already."""
        ...


class MemorySeen:
    """Processed ``webhook-id``s in memory (a restart forgets them; the thread check still
    stops a stale event)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def add(self, webhook_id: str) -> bool:
        with self._lock:
            if webhook_id in self._ids:
                return False
            self._ids.add(webhook_id)
            return True


class SqliteSeen:
    """Processed ``webhook-id``s in a SQLite file (the agent's checkpoint file will do)."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS signoff_webhook_ids "
            "(webhook_id TEXT PRIMARY KEY, outcome TEXT, deliveries INTEGER NOT NULL DEFAULT 1)"
        )

    def add(self, webhook_id: str) -> bool:
        with self._lock:
            inserted = self._db.execute(
                "INSERT OR IGNORE INTO signoff_webhook_ids (webhook_id) VALUES (?)", (webhook_id,)
            ).rowcount
            if not inserted:
                self._db.execute(
                    "UPDATE signoff_webhook_ids SET deliveries = deliveries + 1 "
                    "WHERE webhook_id = ?",
                    (webhook_id,),
                )
            return bool(inserted)

    def forget(self, webhook_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM signoff_webhook_ids WHERE webhook_id = ?", (webhook_id,))
