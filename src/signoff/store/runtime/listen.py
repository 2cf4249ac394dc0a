"""A PostgreSQL ``LISTEN`` that outlives the database: when the connection is lost (a
restart, a failover, a network cut) it is made again, with backoff, and the channel is
listened to again.

Notifications only shorten waits: whoever listens also polls, so nothing is lost while
the listener is down; it is only slower. Each time listening starts (again), ``on_notify``
is called once, because whatever committed while nobody listened was announced to no
one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import structlog

log = structlog.get_logger("signoff.listen")


class Listener:
    """Listens to ``channel`` on ``dsn`` (a plain ``postgresql://`` URL) until stopped.

    ``retry_initial_seconds`` doubles after each failed attempt up to
    ``retry_max_seconds``; :meth:`nudge` cuts a wait short (the dispatcher calls it when
    its own queries succeed again, so listening resumes as soon as the database is back).
    ``check_seconds``: how often an idle connection is probed, so a connection that died
    without a goodbye (a cut network) is noticed too. ``on_payload``, when given, receives
    each notification's payload instead of ``on_notify`` (which is then called only when
    listening starts).
    """

    def __init__(
        self,
        dsn: str,
        channel: str,
        on_notify: Callable[[], None],
        *,
        retry_initial_seconds: float = 0.5,
        retry_max_seconds: float = 30.0,
        check_seconds: float = 30.0,
        connect_timeout_seconds: float = 10.0,
        on_payload: Callable[[str], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.channel = channel
        self._on_notify = on_notify
        self._on_payload = on_payload
        self._retry_initial = retry_initial_seconds
        self._retry_max = retry_max_seconds
        self._check_seconds = check_seconds
        self._connect_timeout = connect_timeout_seconds
        self._nudged = asyncio.Event()
        self.listening = asyncio.Event()
        """Set while the channel is listened to (tests and health checks read it)."""
        self.sessions = 0
        """How many times listening started: 1 for a listener that never lost its
        connection."""

    def nudge(self) -> None:
        """Retry now instead of at the end of the current backoff."""
        self._nudged.set()

    async def run(self, stop: asyncio.Event) -> None:
        delay = self._retry_initial
        lost_at: float | None = None
        failures = 0
        while not stop.is_set():
            self._nudged.clear()
            try:
                connection = await asyncpg.connect(self.dsn, timeout=self._connect_timeout)
            except Exception as exc:  # any failure means: try again later
                failures += 1
                log.warning(
                    "listen.connect_failed",
                    channel=self.channel,
                    attempt=failures,
                    retry_in_seconds=round(delay, 3),
                    error=_describe(exc),
                )
                await _first_of(stop, self._nudged, seconds=delay)
                delay = min(delay * 2, self._retry_max)
                continue
            try:
                closed = asyncio.Event()
                connection.add_termination_listener(_setter(closed))
                await connection.add_listener(self.channel, self._notified)
            except Exception as exc:  # any failure means: try again later
                await _close(connection)
                failures += 1
                log.warning("listen.connect_failed", channel=self.channel, error=_describe(exc))
                await _first_of(stop, self._nudged, seconds=delay)
                delay = min(delay * 2, self._retry_max)
                continue
            self.sessions += 1
            self.listening.set()
            if lost_at is not None:
                log.info(
                    "listen.restored",
                    channel=self.channel,
                    attempts=failures + 1,
                    down_seconds=round(time.monotonic() - lost_at, 3),
                )
            else:
                log.info("listen.started", channel=self.channel, attempts=failures + 1)
            delay, failures = self._retry_initial, 0
            self._on_notify()  # what committed while nobody listened was announced to no one
            try:
                reason = await self._watch(connection, closed, stop)
            finally:
                self.listening.clear()
                await _close(connection)
            if stop.is_set():
                return
            lost_at = time.monotonic()
            log.warning("listen.lost", channel=self.channel, reason=reason)

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        if self._on_payload is not None:
            self._on_payload(payload)
        else:
            self._on_notify()

    async def _watch(
        self, connection: asyncpg.Connection, closed: asyncio.Event, stop: asyncio.Event
    ) -> str:
        """Returns why listening ended: ``stopped``, the connection closed, or a failed
        probe."""
        while True:
            await _first_of(stop, closed, seconds=self._check_seconds)
            if stop.is_set():
                return "stopped"
            if closed.is_set() or connection.is_closed():
                return "connection closed"
            try:
                await asyncio.wait_for(
                    connection.fetchval("SELECT 1"), timeout=self._connect_timeout
                )
            except Exception as exc:  # any failure means: try again later
                return f"probe failed: {_describe(exc)}"


async def _first_of(*events: asyncio.Event, seconds: float) -> None:
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _setter(event: asyncio.Event) -> Callable[[Any], None]:
    return lambda _connection: event.set()


async def _close(connection: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), timeout=2)
    if not connection.is_closed():
        connection.terminate()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]
