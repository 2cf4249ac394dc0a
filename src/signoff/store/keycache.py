"""Verified API keys cached in the process, and the channel that revokes them everywhere.

A cache hit saves the key lookup on every request. Revocation stays immediate on every
replica: on PostgreSQL the revoking transaction sends ``NOTIFY signoff_api_keys`` with
the key's hash, and every process ``LISTEN``\\s on its own connection and drops the entry
(the revoking request waits until its own process has heard the notification, so by the
time it answers, PostgreSQL has handed it to every listener). Until a process listens —
and whenever its listening connection is lost — it caches nothing. On SQLite the cache is
invalidated in the process that revokes (one server process per database file).

A lookup that raced with a revocation never re-inserts the revoked key: entries are only
stored if no invalidation happened since the lookup started (``generation``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import structlog

from signoff.domain.tasks import Principal

log = structlog.get_logger("signoff.keys")

CHANNEL = "signoff_api_keys"
MAX_ENTRIES = 10_000


class KeyCache:
    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.generation = 0
        self._entries: dict[str, Principal] = {}
        self._heard: dict[str, asyncio.Event] = {}

    def get(self, key_hash: str) -> Principal | None:
        return self._entries.get(key_hash) if self.enabled else None

    def put(self, key_hash: str, principal: Principal, generation: int) -> None:
        if not self.enabled or generation != self.generation:
            return
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key_hash] = principal

    def invalidate(self, key_hash: str | None = None) -> None:
        """Forget one key (or all). Also releases whoever waits to hear about it."""
        self.generation += 1
        if key_hash is None:
            self._entries.clear()
            return
        self._entries.pop(key_hash, None)
        heard = self._heard.pop(key_hash, None)
        if heard is not None:
            heard.set()

    def disable(self) -> None:
        self.enabled = False
        self.invalidate()

    async def heard(self, key_hash: str, seconds: float) -> None:
        """Wait until this process's listener has heard ``key_hash`` revoked (PostgreSQL)."""
        if not self.enabled:
            return
        event = self._heard.setdefault(key_hash, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)


async def listen(cache: KeyCache, url: str, stop: asyncio.Event) -> None:
    """Keep a ``LISTEN signoff_api_keys`` connection open until ``stop``; the cache is on
    only while it is (reconnects after a loss)."""
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    while not stop.is_set():
        lost = asyncio.Event()
        try:
            connection = await asyncpg.connect(dsn)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("api_key_cache.listen_failed", error=str(exc))
            await _pause(stop, 5)
            continue
        try:

            def on_notify(_c: Any, _pid: int, _channel: str, payload: str) -> None:
                cache.invalidate(payload or None)

            connection.add_termination_listener(lambda _c, lost=lost: lost.set())
            await connection.add_listener(CHANNEL, on_notify)
            cache.invalidate()
            cache.enabled = True
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait())]
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("api_key_cache.listen_lost", error=str(exc))
        finally:
            cache.disable()
            with contextlib.suppress(Exception):
                await connection.close()
        if not stop.is_set():
            await _pause(stop, 1)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
