"""Verified API keys cached in the process, and the channel that revokes them everywhere.

A cache hit saves the key lookup on every request. Revocation stays immediate on every
replica: on PostgreSQL the revoking transaction sends ``NOTIFY signoff_api_keys`` with
the key's hash, and every process listens on its own connection
(:class:`signoff.store.runtime.listen.Listener`, remade whenever it is lost) and drops the
entry; the revoking request waits until its own process has heard the notification, so
by the time it answers PostgreSQL has handed it to every listener. A process caches
nothing until it listens, nor while its listening connection is down, and forgets
everything each time listening (re)starts. On SQLite the cache is invalidated in the
process that revokes (one server process per database file).

A lookup that raced with a revocation never re-inserts the revoked key: an entry is
stored only if no invalidation happened since its lookup started (``generation``).
"""

from __future__ import annotations

import asyncio
import contextlib

from signoff.domain.tasks import Principal
from signoff.store.runtime.listen import Listener

CHANNEL = "signoff_api_keys"
MAX_ENTRIES = 10_000


class KeyCache:
    """``listen_url``: a plain ``postgresql://`` URL to listen on; ``None`` on SQLite."""

    def __init__(self, listen_url: str | None) -> None:
        self.generation = 0
        self.disabled = False
        self._entries: dict[str, Principal] = {}
        self._heard: dict[str, asyncio.Event] = {}
        self._recent: dict[str, None] = {}  # revocations heard lately, oldest first
        self.listener: Listener | None = None
        if listen_url is not None:
            self.listener = Listener(
                listen_url, CHANNEL, self._forget_all, on_payload=self._revoked
            )
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        if self.disabled:
            return False
        return self.listener is None or self.listener.listening.is_set()

    def start(self) -> None:
        """Start listening (PostgreSQL); the cache turns on once it listens."""
        if self.listener is not None and self._running is None and not self.disabled:
            self._running = asyncio.create_task(self.listener.run(self._stop))

    async def close(self) -> None:
        self._stop.set()
        running, self._running = self._running, None
        if running is not None:
            done, _ = await asyncio.wait({running}, timeout=2)
            if not done:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)

    def disable(self) -> None:
        """Never cache (``SIGNOFF_API_KEY_CACHE=false``, or no way to hear revocations)."""
        self.disabled = True
        self._forget_all()

    def get(self, key_hash: str) -> Principal | None:
        return self._entries.get(key_hash) if self.enabled else None

    def put(self, key_hash: str, principal: Principal, generation: int) -> None:
        if not self.enabled or generation != self.generation:
            return
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key_hash] = principal

    def invalidate(self, key_hash: str) -> None:
        """Forget one key (this process's own revocation)."""
        self.generation += 1
        self._entries.pop(key_hash, None)

    async def heard(self, key_hash: str, seconds: float) -> None:
        """Wait until this process's listener has heard ``key_hash`` revoked (PostgreSQL)."""
        if not self.enabled or self.listener is None or key_hash in self._recent:
            return
        event = self._heard.setdefault(key_hash, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)

    def _revoked(self, key_hash: str) -> None:
        self.invalidate(key_hash)
        self._recent[key_hash] = None
        if len(self._recent) > 1000:
            del self._recent[next(iter(self._recent))]
        heard = self._heard.pop(key_hash, None)
        if heard is not None:
            heard.set()

    def _forget_all(self) -> None:
        self.generation += 1
        self._entries.clear()
