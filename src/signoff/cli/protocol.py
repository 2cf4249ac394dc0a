"""The HTTP protocol ``signoff serve`` speaks: uvicorn's httptools protocol with what it
lacks for a server with no proxy in front.

* A connection must finish each request's headers within ``SIGNOFF_HEADER_TIMEOUT_SECONDS``
  of opening (or of the request's first byte); otherwise it is closed. uvicorn times out
  idle keep-alive connections only: a client that sends half a header would keep its
  connection, and its file descriptor, forever.
* A request's body must arrive within ``SIGNOFF_BODY_TIMEOUT_SECONDS`` of its headers and,
  after ``SIGNOFF_BODY_RATE_GRACE_SECONDS``, at ``SIGNOFF_BODY_MIN_RATE_BYTES`` a second on
  average; otherwise the connection is closed. Time during which the server itself stops
  reading (the application has not taken what arrived) does not count against the client.
* A client that reads nothing of an answer for ``SIGNOFF_WRITE_TIMEOUT_SECONDS`` (the send
  buffer full all along) has its connection aborted: nothing it was sent can flush.
* At most ``SIGNOFF_MAX_CONNECTIONS`` connections per process: one more is closed as soon
  as it is accepted, so no flood of connections can take every file descriptor.
* When the server begins to shut down, every long-poll and event stream is answered at
  once (:mod:`signoff.draining`) instead of holding the graceful wait.
"""

from __future__ import annotations

import asyncio

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from signoff.draining import stopping
from signoff.settings import Settings


class SignoffHttp(HttpToolsProtocol):
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    body_min_rate_bytes: int = 1024
    body_rate_grace_seconds: float = 5.0
    write_timeout_seconds: float = 30.0
    max_connections: int = 1000

    @classmethod
    def configure(cls, settings: Settings) -> None:
        """Take the limits from ``settings`` (once per process, before serving)."""
        cls.header_timeout_seconds = settings.header_timeout_seconds
        cls.body_timeout_seconds = settings.body_timeout_seconds
        cls.body_min_rate_bytes = settings.body_min_rate_bytes
        cls.body_rate_grace_seconds = settings.body_rate_grace_seconds
        cls.write_timeout_seconds = settings.write_timeout_seconds
        cls.max_connections = settings.max_connections

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._headers_due: asyncio.TimerHandle | None = None
        self._body_due: asyncio.TimerHandle | None = None
        self._write_due: asyncio.TimerHandle | None = None
        self._body_started = 0.0
        self._body_bytes = 0
        self._body_waited = 0.0  # seconds the server itself held reading back
        self._read_held_since: float | None = None
        self._running: RequestResponseCycle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.close()
            return
        self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        self._body_arrived()
        self._written()
        running = self._running
        if running is not None and not running.response_complete:
            # uvicorn tells only the newest request of a connection that it is gone; with
            # requests pipelined behind it, the one being answered would write to a
            # closed transport.
            running.disconnected = True
            running.message_event.set()
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._expect_headers()

    def on_headers_complete(self) -> None:
        self._headers_arrived()
        super().on_headers_complete()
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self._expect_body()  # an upgraded connection is another protocol's

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._body_arrived()
        super().on_message_complete()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_due is None:
            self._write_due = self.loop.call_later(self.write_timeout_seconds, self._write_late)

    def resume_writing(self) -> None:
        self._written()
        super().resume_writing()

    def shutdown(self) -> None:
        stopping()  # the first connection told to shut down wakes every waiter
        super().shutdown()

    # --- headers ------------------------------------------------------------------

    def _expect_headers(self) -> None:
        if self._headers_due is None:
            self._headers_due = self.loop.call_later(
                self.header_timeout_seconds, self._headers_late
            )

    def _headers_arrived(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_late(self) -> None:
        self._headers_due = None
        self._close()

    # --- body ---------------------------------------------------------------------

    def _expect_body(self) -> None:
        self._body_arrived()
        self._body_started = self.loop.time()
        self._body_bytes = 0
        self._body_waited = 0.0
        self._read_held_since = None
        self._body_due = self.loop.call_at(self._body_deadline(), self._check_body)

    def _body_deadline(self) -> float:
        """When the body will be late, given what has arrived so far: the earlier of the
        whole-body deadline and the moment its average rate falls below the minimum."""
        start = self._body_started + self._body_waited
        due = start + self.body_timeout_seconds
        if self.body_min_rate_bytes:
            rate_due = (
                start + self.body_rate_grace_seconds + self._body_bytes / self.body_min_rate_bytes
            )
            due = min(due, rate_due)
        return due

    def _check_body(self) -> None:
        self._body_due = None
        now = self.loop.time()
        held = (self.flow is not None and self.flow.read_paused) or (
            self.cycle is not None and self.cycle.waiting_for_100_continue
        )
        if held:
            # The server is not reading (the application has not taken the body yet, or
            # not yet asked for a body sent after "100 Continue", or an earlier request
            # on this connection is still answered): not the client's delay. Count the
            # time from here until reading resumes.
            if self._read_held_since is None:
                self._read_held_since = now
            self._body_due = self.loop.call_at(now + 1.0, self._check_body)
            return
        if self._read_held_since is not None:
            self._body_waited += now - self._read_held_since
            self._read_held_since = None
        due = self._body_deadline()
        if due > now:
            self._body_due = self.loop.call_at(due, self._check_body)
            return
        self._close()

    def _body_arrived(self) -> None:
        if self._body_due is not None:
            self._body_due.cancel()
            self._body_due = None

    # --- writing ------------------------------------------------------------------

    def _written(self) -> None:
        if self._write_due is not None:
            self._write_due.cancel()
            self._write_due = None

    def _write_late(self) -> None:
        self._write_due = None
        self.transport.abort()  # close() would wait for a buffer that never drains

    def _close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()
