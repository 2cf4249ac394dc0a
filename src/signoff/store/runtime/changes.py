"""Who waits for which task, and what wakes them: the change signal of one process.

A commit that changed tasks wakes this process's waiters directly. On PostgreSQL one
shared listener connection per process (``LISTEN signoff_outbox``: every process
announces the tasks it changed, in batches, :mod:`signoff.store.runtime.announce`) wakes waiters
here for changes made elsewhere, and wakes this process's dispatcher. The listener is made again
whenever its connection is lost (:class:`signoff.store.runtime.listen.Listener`); each time it
starts listening, every waiter re-reads, since what committed meanwhile was announced to
no one. Waiters are plain ``asyncio`` events: a thousand idle long-polls hold no database
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterable, Iterator

from signoff.metrics import LONG_POLL_WAITERS
from signoff.store.runtime.announce import CHANNEL as NOTIFY_CHANNEL  # re-exported
from signoff.store.runtime.announce import parse_payload
from signoff.store.runtime.listen import Listener

__all__ = ["NOTIFY_CHANNEL", "TaskChanges"]

#: How long the first long-poll waits for the listener before relying on its own wait.
START_SECONDS = 5.0


class TaskChanges:
    """The per-process hub. ``listen_url`` (a plain ``postgresql://`` URL) enables the
    shared listener; ``None`` (SQLite) leaves the in-process signal only, which is what a
    single-process SQLite deployment needs (other processes' commits are seen when a
    waiter's time is up)."""

    def __init__(self, listen_url: str | None) -> None:
        self._waiters: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._subscribers: set[Callable[[], None]] = set()
        self._parked = 0
        self.listener: Listener | None = None
        if listen_url is not None:
            self.listener = Listener(
                listen_url,
                NOTIFY_CHANNEL,
                self._wake_everyone,
                on_payload=self._notified,
            )
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self.draining = False
        """The process is stopping: waiters answer at once, new ones do not wait."""

    @property
    def waiting(self) -> int:
        """How many waiters are parked now (read done, waiting for a change)."""
        return self._parked

    async def start(self) -> None:
        """Make sure the shared listener runs (PostgreSQL). Idempotent; the first call
        waits a little for it to listen, so an early waiter does not miss a change."""
        listener = self.listener
        if listener is None or self._stop.is_set():
            return
        if self._running is None:
            self._running = asyncio.create_task(listener.run(self._stop))
        if not listener.listening.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(listener.listening.wait(), timeout=START_SECONDS)

    async def close(self) -> None:
        self._stop.set()
        running, self._running = self._running, None
        if running is not None:
            # A connection attempt under way is not worth waiting for.
            done, _ = await asyncio.wait({running}, timeout=2)
            if not done:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        self._wake_everyone()

    def drain(self) -> None:
        """Wake every waiter now, and let no new one wait (the process is stopping)."""
        self.draining = True
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

    async def park(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait for ``event`` (from :meth:`watch`) at most ``seconds``; True when it was
        set. The caller must hold no database connection. While draining: False at once."""
        if self.draining:
            return False
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

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every notification and whenever listening (re)starts (the
        dispatcher's wake-up); returns the unsubscribe function."""
        self._subscribers.add(callback)
        return lambda: self._subscribers.discard(callback)

    def _notified(self, payload: str) -> None:
        for callback in list(self._subscribers):
            callback()
        self.changed(parse_payload(payload))

    def _wake_everyone(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()
        for callback in list(self._subscribers):
            callback()
