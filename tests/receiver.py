"""A real HTTP receiver on 127.0.0.1 for webhook tests, with scripted answers."""

from __future__ import annotations

import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    trickle_bytes: int = 0
    """Send the body one byte every 0.5 s after the headers (a slow-loris answer)."""
    hold: threading.Event | None = None
    """Answer only once this is set."""


class Receiver:
    """Answers each request with the next scripted :class:`Answer` (then 200)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: serve HTTPS with this server context, at ``https://localhost:PORT``."""
        self.received: list[Received] = []
        self.script: deque[Answer] = deque()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._lock:
                    receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                    answer = receiver.script.popleft() if receiver.script else Answer()
                if answer.delay_seconds:
                    time.sleep(answer.delay_seconds)
                if answer.hold is not None:
                    answer.hold.wait(timeout=60)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                length = answer.trickle_bytes or 2
                self.send_header("content-length", str(length))
                self.end_headers()
                if not answer.trickle_bytes:
                    self.wfile.write(b"ok")
                    return
                for _ in range(answer.trickle_bytes):
                    try:
                        self.wfile.write(b".")
                        self.wfile.flush()
                    except OSError:
                        return  # the sender gave up
                    time.sleep(0.5)

            def log_message(self, *_args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # many dispatchers connect at once
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.url = f"https://localhost:{port}"
        # serve_forever looks for shutdown() between polls: 0.5 s each by default, which
        # every test that stops a receiver would wait out.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, *answers: Answer) -> None:
        self.script.extend(answers)

    def ids(self) -> list[str]:
        return [r.headers["webhook-id"] for r in self.received]
