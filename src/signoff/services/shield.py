"""The Redis storm shield: absorbs duplicate escalations in flight before they reach the
database (``SIGNOFF_REDIS_URL``; off when unset).

A failing fleet's retry loops re-send the same escalation (same idempotency key and
body) many times a second, and new keys for an entity that is already queued. With the
shield, an escalation first takes two short-lived Redis locks (``SET NX PX``): one per
idempotency key, one per entity. A duplicate that finds a lock held waits briefly for
the first to finish; then it replays the first's response from Redis (the first stores
it once its transaction committed) or, with no response to replay, goes on to the
database like any request. Responses are only ever replayed for the same key *and* the
same body fingerprint; anything else is the database's to answer.

The database stays the final word: the unique constraints decide, the shield only saves
them work. If Redis is down, slow, or flushed mid-storm, every request goes to the
database as if there were no shield — nothing is duplicated, nothing fails — and each
failure is a log line (``storm_shield.unavailable``) and a metric
(``signoff_storm_shield_total{result="redis_error"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from signoff.metrics import STORM_SHIELD

log = structlog.get_logger("signoff.shield")

LOCK_MILLISECONDS = 5_000
"""A lock outlives any sane escalation; if its holder dies, it lapses by itself."""
REPLAY_SECONDS = 60
"""How long a committed response stays replayable from Redis (the database keeps it for
the idempotency TTL)."""
POLL_SECONDS = 0.005
CONNECTION_WAIT_SECONDS = 0.25
"""The least a Redis call waits for a free connection of the process's pool (all in use
in a storm wider than ``SIGNOFF_STORM_SHIELD_CONNECTIONS``) before it counts as a failure;
it waits as long as a duplicate waits for the first (``wait_seconds``) when that is
longer."""

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Replay:
    status_code: int
    body: str


class StormShield:
    def __init__(self, url: str, *, wait_seconds: float = 1.0, connections: int = 100) -> None:
        import redis.asyncio as aioredis

        self.wait_seconds = wait_seconds
        # A blocking pool: with every connection in use a call waits for one (briefly)
        # rather than failing, which would switch the shield off in the storm it is for.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=connections,
            timeout=max(wait_seconds, CONNECTION_WAIT_SECONDS),
            socket_timeout=0.25,
            socket_connect_timeout=0.25,
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._redis: Any = aioredis.Redis.from_pool(pool)  # closes the pool with it
        self._release: Any = self._redis.register_script(_RELEASE)
        self._down_until = 0.0

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._redis.aclose()

    @contextlib.asynccontextmanager
    async def escalation(
        self, producer_id: str, key: str, fingerprint: str, entity: tuple[str, str]
    ) -> AsyncIterator[EscalationGuard]:
        """Hold the key's and the entity's locks around one escalation (as far as Redis
        allows). The guard says whether a stored response can be replayed instead."""
        guard = EscalationGuard(self, producer_id, key, fingerprint, entity)
        try:
            await guard.enter()
            yield guard
        finally:
            await guard.leave()

    async def _call(self, what: Callable[[], Awaitable[Any]]) -> Any:
        """A Redis call; ``None`` (and a log line, a metric) when Redis fails. After a
        failure Redis is left alone for a second, so a dead Redis costs nothing."""
        if time.monotonic() < self._down_until:
            return None
        try:
            return await what()
        except Exception as exc:  # any Redis failure means: the database alone decides
            self._down_until = time.monotonic() + 1.0
            STORM_SHIELD.labels("redis_error").inc()
            log.warning("storm_shield.unavailable", error=f"{type(exc).__name__}: {exc}"[:200])
            return None


class EscalationGuard:
    def __init__(
        self,
        shield: StormShield,
        producer_id: str,
        key: str,
        fingerprint: str,
        entity: tuple[str, str],
    ) -> None:
        self._shield = shield
        self._fingerprint = fingerprint
        self._key_lock = f"signoff:shield:key:{producer_id}:{key}"
        self._entity_lock = f"signoff:shield:entity:{entity[0]}:{entity[1]}"
        self._response = f"signoff:shield:response:{producer_id}:{key}"
        self._token = uuid.uuid4().hex
        self._held: list[str] = []
        self.replay: Replay | None = None

    async def enter(self) -> None:
        shield = self._shield
        deadline = time.monotonic() + shield.wait_seconds
        for lock in (self._key_lock, self._entity_lock):
            while True:
                if lock == self._key_lock:
                    self.replay = await self._stored()
                    if self.replay is not None:
                        STORM_SHIELD.labels("replayed").inc()
                        return
                taken = await shield._call(
                    lambda lock=lock: shield._redis.set(  # type: ignore[misc]
                        lock, self._token, nx=True, px=LOCK_MILLISECONDS
                    )
                )
                if taken is None or taken:
                    if taken:
                        self._held.append(lock)
                    break
                if time.monotonic() >= deadline:
                    STORM_SHIELD.labels("waited_out").inc()
                    return  # the database decides
                STORM_SHIELD.labels("waited").inc()
                await asyncio.sleep(POLL_SECONDS)

    async def _stored(self) -> Replay | None:
        raw = await self._shield._call(lambda: self._shield._redis.get(self._response))
        if not raw:
            return None
        try:
            stored = orjson.loads(raw)
            if stored["fingerprint"] != self._fingerprint:
                return None  # the database explains ERR_IDEMPOTENCY_KEY_REUSED
            return Replay(int(stored["status"]), str(stored["body"]))
        except (ValueError, KeyError, TypeError):
            return None

    async def committed(self, status_code: int, body: str) -> None:
        """The escalation's response, once its transaction committed (or its replay)."""
        shield = self._shield
        value = orjson.dumps(
            {"fingerprint": self._fingerprint, "status": status_code, "body": body}
        )
        await shield._call(lambda: shield._redis.set(self._response, value, ex=REPLAY_SECONDS))

    async def leave(self) -> None:
        shield = self._shield
        for lock in reversed(self._held):
            await shield._call(
                lambda lock=lock: shield._release(keys=[lock], args=[self._token])  # type: ignore[misc]
            )
        self._held.clear()
