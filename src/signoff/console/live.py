"""Live updates for open console pages, fed by the dispatcher's change signal.

A commit that changed a task wakes this process's listeners; on PostgreSQL the shared
``LISTEN signoff_outbox`` of :mod:`signoff.store.runtime.changes` (the one the dispatcher wakes
on) brings changes made by other replicas. One :class:`ChangeHub` per application listens
while a page is open and wakes every Server-Sent Events stream, which tells the page to
look again; the page then asks the server what changed. SQLite with several processes has
no cross-process signal: pages also poll slowly, as a fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from signoff.services.context import ServiceContext

log = structlog.get_logger("signoff.console")

#: A stream ends after this long and the browser reconnects (keeps shutdown quick).
STREAM_SECONDS = 20.0
HEARTBEAT_SECONDS = 10.0


class ChangeHub:
    """Counts changes; streams wait for the count to move."""

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.generation = 0
        self._moved = asyncio.Condition()
        self._subscribers = 0
        self._runner: asyncio.Task[None] | None = None

    async def _bump(self) -> None:
        async with self._moved:
            self.generation += 1
            self._moved.notify_all()

    async def _run(self) -> None:
        changes = self.context.database.changes
        local = asyncio.Event()  # a commit in this process changed a task
        remote = asyncio.Event()  # a notification from another process (PostgreSQL)
        self.context.database.change_listeners.add(local)
        unsubscribe = changes.subscribe(remote.set)
        try:
            await changes.start()  # the shared listener (PostgreSQL); idempotent
            while True:
                waiters = [
                    asyncio.ensure_future(local.wait()),
                    asyncio.ensure_future(remote.wait()),
                ]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
                local.clear()
                remote.clear()
                await self._bump()
                await asyncio.sleep(0.2)  # coalesce a burst of changes into one wake-up
        finally:
            self.context.database.change_listeners.discard(local)
            unsubscribe()

    @contextlib.asynccontextmanager
    async def subscription(self) -> AsyncIterator[None]:
        self._subscribers += 1
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        try:
            yield
        finally:
            self._subscribers -= 1
            if self._subscribers == 0 and self._runner is not None:
                self._runner.cancel()
                self._runner = None

    async def wait(self, seen: int, seconds: float) -> int:
        """The generation once it differs from ``seen``, or ``seen`` after ``seconds``."""
        async with self._moved:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._moved.wait_for(lambda: self.generation != seen), seconds
                )
            return self.generation


def hub_for(app_state: Any, context: ServiceContext) -> ChangeHub:
    hub: ChangeHub | None = getattr(app_state, "console_changes", None)
    if hub is None or hub.context is not context:
        hub = ChangeHub(context)
        app_state.console_changes = hub
    return hub


async def event_stream(
    hub: ChangeHub, is_disconnected: Any, give_back: Callable[[], None]
) -> AsyncIterator[str]:
    """``change`` events while something changes, comments as heartbeats; ends after
    :data:`STREAM_SECONDS` (the browser reconnects on its own), or at once when the server
    stops. ``give_back`` returns the stream's slot when it ends."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + STREAM_SECONDS
    try:
        async with hub.subscription():
            seen = hub.generation
            yield "retry: 2000\n\n"
            while loop.time() < ends:
                if hub.context.database.changes.draining or await is_disconnected():
                    return  # the server is stopping: the browser reconnects to another
                left = min(HEARTBEAT_SECONDS, ends - loop.time())
                current = await hub.wait(seen, max(left, 0.0))
                if current != seen:
                    seen = current
                    yield f"event: change\ndata: {current}\n\n"
                else:
                    yield ": keep-alive\n\n"
    finally:
        give_back()
