"""Cross-process change notifications, coalesced (PostgreSQL).

Other processes learn that tasks changed through ``NOTIFY signoff_outbox`` (their
dispatchers wake, their long-poll waiters re-read; :mod:`signoff.store.runtime.changes`). A
notification sent *inside* each writing transaction would serialise every commit:
PostgreSQL queues notifications under one database-wide lock that a transaction holds
from its commit until its commit record is flushed. So the writing transactions notify
nobody; after each commit this process hands the changed task ids to its
:class:`Announcer`, which sends them in batches from one background task: whatever
committed while one batch was being sent goes in the next, at most one batch in flight
per process, and a batch starts at least :data:`COALESCE_SECONDS` (10 ms) after the one
before. A batch is its own tiny transaction (``synchronous_commit = off``: a
notification is a hint, never the record). Under escalation load on one process,
sending a batch as soon as the previous one was answered cost about 9 % of the server's
CPU (py-spy).

What a lost notification costs (the process died between its commit and the batch, or
the database was unreachable): other processes see the change by polling — dispatchers
every ``SIGNOFF_DISPATCHER_POLL_SECONDS``, long-poll waiters when their wait ends. A
notification is never sent before its change committed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable

import structlog

from signoff.store.runtime.availability import database_unavailable

log = structlog.get_logger("signoff.announce")

CHANNEL = "signoff_outbox"
#: PostgreSQL refuses payloads of 8,000 bytes or more; 200 ids of 37 bytes stay below.
IDS_PER_NOTIFICATION = 200
#: Longest wait for one batch: a database that accepts connections but never answers
#: must not hold the announcements behind it (or a shutdown) for asyncpg's 60 s.
SEND_SECONDS = 5.0
#: The shortest time between two batches while commits keep coming: a busy process
#: sends at most 100 notifying transactions a second (each one also costs every
#: listening process a wake-up), and a quiet one sends each change at once.
COALESCE_SECONDS = 0.01
#: Longest a shutdown waits for the last batch.
DRAIN_SECONDS = 2.0

Send = Callable[[str], Awaitable[object]]
"""Runs one SQL text (a whole transaction) on the database."""


def notify_sql(task_ids: list[uuid.UUID]) -> str:
    """One transaction that announces ``task_ids``: a ``NOTIFY`` per 200 ids. The payload
    is built from :class:`uuid.UUID` values only (hex digits and dashes), so it needs no
    quoting beyond the literal's own."""
    statements = ["BEGIN", "SET LOCAL synchronous_commit = off"]
    for start in range(0, len(task_ids), IDS_PER_NOTIFICATION):
        payload = ",".join(str(t) for t in task_ids[start : start + IDS_PER_NOTIFICATION])
        statements.append(f"NOTIFY {CHANNEL}, '{payload}'")
    statements.append("COMMIT")
    return "; ".join(statements)


def parse_payload(payload: str) -> list[uuid.UUID]:
    """The task ids a notification names (an empty or foreign payload names none)."""
    ids = []
    for part in payload.split(","):
        try:
            ids.append(uuid.UUID(part))
        except ValueError:
            continue
    return ids


class Announcer:
    """Batches the task ids committed by this process into notifications for the others."""

    def __init__(self, send: Send, *, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: seconds on a clock that never goes back (the window's)."""
        self._send = send
        self._pending: dict[uuid.UUID, None] = {}
        self._running: asyncio.Task[None] | None = None
        self.sent = 0
        """Notifying transactions sent (tests read it)."""
        self._clock = clock
        self._last_batch_at = float("-inf")
        """When the last batch started (on ``clock``)."""

    def announce(self, task_ids: Iterable[uuid.UUID]) -> None:
        """Queue ``task_ids`` (already committed) for the next batch. Needs a running loop."""
        self._pending.update(dict.fromkeys(task_ids))
        if self._pending and (self._running is None or self._running.done()):
            self._running = asyncio.get_running_loop().create_task(self._flush())

    async def drain(self, seconds: float = DRAIN_SECONDS) -> None:
        """Wait until everything announced so far was sent or given up, at most
        ``seconds``; then stop sending (what is left is a hint the others poll for)."""
        running = self._running
        if running is None or running.done():
            return
        done, _ = await asyncio.wait({running}, timeout=seconds)
        if not done:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            log.warning("announce.abandoned", tasks=len(self._pending))
            self._pending.clear()

    async def _flush(self) -> None:
        while self._pending:
            # At most one batch per window: what commits until then joins this one.
            wait = self._last_batch_at + COALESCE_SECONDS - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            batch = list(self._pending)
            self._pending.clear()
            self._last_batch_at = self._clock()
            try:
                async with asyncio.timeout(SEND_SECONDS):
                    await self._send(notify_sql(batch))
                self.sent += 1
            except Exception as exc:  # a hint lost: the others poll
                event = "announce.unavailable" if database_unavailable(exc) else "announce.failed"
                log.warning(event, tasks=len(batch), error=repr(exc)[:300])
