"""Who waits for which task, and what wakes them: the change signal of one process.

A commit that changed tasks wakes this process's waiters directly. On PostgreSQL one
shared listener connection per process (``LISTEN signoff_outbox``: a trigger notifies,
naming the task, when an outbox event commits in any process) wakes waiters here for
changes made elsewhere, and wakes this process's dispatcher. Waiters are plain
``asyncio`` events: a thousand idle long-polls hold no database connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import asyncpg
import structlog

from signoff.metrics import LONG_POLL_WAITERS

log = structlog.get_logger("signoff.changes")

NOTIFY_CHANNEL = "signoff_outbox"
RECONNECT_SECONDS = 1.0


class TaskChanges:
    """The per-process hub. ``listen_url`` (a plain ``postgresql://`` URL) enables the
    shared listener; ``None`` (SQLite) leaves only the in-process signal, which is all a
    single SQLite file has: its writers are this process or wake nobody."""

    def __init__(self, listen_url: str | None) -> None:
        self._listen_url = listen_url
        self._waiters: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._subscribers: set[Callable[[], None]] = set()
        self._connection: Any = None
        self._connected = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False
        self._parked = 0

    @property
    def waiting(self) -> int:
        """How many waiters are parked now (read done, waiting for a change)."""
        return self._parked

    async def park(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait for ``event`` (from :meth:`watch`) at most ``seconds``; True when
        it was set. The caller must hold no database connection."""
        self._parked += 1
        LONG_POLL_WAITERS.inc()
        try:
            await asyncio.wait_for(event.wait(), timeout=seconds)
            return True
        except TimeoutError:
            return False
        finally:
            self._parked -= 1
            LONG_POLL_WAITERS.dec()

    async def start(self) -> None:
        """Make sure the listener runs (PostgreSQL); returns once it listens, or after
        its first failed attempt (waiters then still wake from this process's commits
        and when their time is up). Idempotent."""
        if self._listen_url is None or self._closed:
            return
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep_listening())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._connected.wait()), timeout=5)

    async def close(self) -> None:
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._keeper
        await self._drop_connection()
        self._wake_everyone()

    def changed(self, task_ids: Iterable[uuid.UUID]) -> None:
        """Tasks changed (a commit in this process, or a notification)."""
        for task_id in task_ids:
            for event in self._waiters.get(task_id, ()):
                event.set()

    @contextlib.contextmanager
    def watch(self, task_id: uuid.UUID) -> Iterator[asyncio.Event]:
        """An event set when ``task_id`` changes. Register *before* reading the task, so a
        change between the read and the wait is not missed."""
        event = asyncio.Event()
        self._waiters.setdefault(task_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiters.get(task_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[task_id]

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every notification (the dispatcher's wake-up); returns the
        unsubscribe function."""
        self._subscribers.add(callback)
        return lambda: self._subscribers.discard(callback)

    @property
    def listening(self) -> bool:
        return self._connection is not None

    def _on_notification(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        for callback in list(self._subscribers):
            callback()
        try:
            task_id = uuid.UUID(payload)
        except ValueError:
            return
        self.changed([task_id])

    def _wake_everyone(self) -> None:
        """Waiters re-read when notifications may have been lost (listener reconnect)."""
        for events in self._waiters.values():
            for event in events:
                event.set()
        for callback in list(self._subscribers):
            callback()

    async def _keep_listening(self) -> None:
        assert self._listen_url is not None
        while not self._closed:
            lost = asyncio.Event()
            try:
                connection = await asyncpg.connect(self._listen_url)
                connection.add_termination_listener(lambda _c, lost=lost: lost.set())
                await connection.add_listener(NOTIFY_CHANNEL, self._on_notification)
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("changes.listen_failed", error=str(exc))
                self._connected.set()  # do not hold callers up; retry in the background
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            self._connection = connection
            self._connected.set()
            # Anything committed while we were not listening: let everyone re-read.
            self._wake_everyone()
            await lost.wait()
            log.warning("changes.listener_lost")
            await self._drop_connection()
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()
