"""The HTTP protocol ``signoff serve`` speaks: uvicorn's httptools protocol with what it
lacks for a server with no proxy in front.

* A connection must finish each request's headers within ``SIGNOFF_HEADER_TIMEOUT_SECONDS``
  of opening (or of the request's first byte); otherwise it is closed. uvicorn times out
  idle keep-alive connections only: a client that sends half a header would keep its
  connection, and its file descriptor, forever.
* At most ``SIGNOFF_MAX_CONNECTIONS`` connections per process: one more is closed as soon
  as it is accepted, so no flood of connections can take every file descriptor.
* When the server begins to shut down, every long-poll and event stream is answered at
  once (:mod:`signoff.draining`) instead of holding the graceful wait.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from signoff.draining import stopping
from signoff.settings import Settings


class SignoffHttp(HttpToolsProtocol):
    header_timeout_seconds: float = 10.0
    max_connections: int = 1000

    @classmethod
    def configure(cls, settings: Settings) -> None:
        """Take the limits from ``settings`` (once per process, before serving)."""
        cls.header_timeout_seconds = settings.header_timeout_seconds
        cls.max_connections = settings.max_connections

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._headers_due: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.close()
            return
        self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._expect_headers()

    def on_headers_complete(self) -> None:
        self._headers_arrived()
        super().on_headers_complete()

    def shutdown(self) -> None:
        stopping()  # the first connection told to shut down wakes every waiter
        super().shutdown()

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
        if not self.transport.is_closing():
            self.transport.close()
