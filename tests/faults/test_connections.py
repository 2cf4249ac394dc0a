"""``signoff serve`` bounds what a connection may hold without a proxy in front: a
connection that never finishes its headers is closed after ``SIGNOFF_HEADER_TIMEOUT_SECONDS``,
and connections beyond ``SIGNOFF_MAX_CONNECTIONS`` are closed as soon as they open."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.faults.harness import service_env
from tests.processes import Server, wait_for

#: How long the test waits for the server to act: far longer than the settings it sets.
PATIENCE = 30


@contextmanager
def _connection(port: int) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
    try:
        yield sock
    finally:
        sock.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (end of stream or reset); raises
    ``TimeoutError`` when it keeps it open for :data:`PATIENCE` seconds."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_half_a_header_is_closed_after_the_header_timeout(
    database_url: str, tmp_path: Path
) -> None:
    env = service_env(database_url, SIGNOFF_HEADER_TIMEOUT_SECONDS="1")
    with Server(env, tmp_path / "serve.log") as server:
        with _connection(server.port) as silent, _connection(server.port) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: signoff\r\nX-Slow: ")
            assert _closed_by_server(slow)
            assert _closed_by_server(silent)  # nothing sent at all: the same
        with _connection(server.port) as whole:  # a whole request is answered
            whole.sendall(b"GET /healthz HTTP/1.1\r\nHost: signoff\r\n\r\n")
            assert whole.recv(1024).startswith(b"HTTP/1.1 200")
        assert "Traceback" not in server.log.read_text()


def test_connections_beyond_the_cap_are_refused_until_some_close(
    database_url: str, tmp_path: Path
) -> None:
    env = service_env(
        database_url, SIGNOFF_MAX_CONNECTIONS="4", SIGNOFF_HEADER_TIMEOUT_SECONDS="120"
    )
    with Server(env, tmp_path / "serve.log") as server:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        try:
            # The server accepts the connection, then closes it at once.
            with _connection(server.port) as extra:
                assert _closed_by_server(extra)
            assert not _healthy(server.base_url)
        finally:
            for sock in held:
                sock.close()
        wait_for(lambda: _healthy(server.base_url), seconds=PATIENCE, what="a slot again")


def _log_events(log: Path, event: str) -> list[dict[str, object]]:
    lines = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == event:
            lines.append(record)
    return lines


@pytest.mark.parametrize("path", ["/console/login", "/r/some-resume-link-token"])
def test_a_client_gone_mid_body_is_one_info_line_without_a_traceback(
    database_url: str, tmp_path: Path, path: str
) -> None:
    env = service_env(database_url)
    with Server(env, tmp_path / "serve.log") as server:
        with _connection(server.port) as gone:
            gone.sendall(
                f"POST {path} HTTP/1.1\r\nHost: signoff\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                "Content-Length: 1000\r\n\r\nusername=ann&pass".encode()
            )
        wait_for(
            lambda: (
                _log_events(server.log, "request.client_gone")
                or "Traceback" in server.log.read_text()
            ),
            seconds=PATIENCE,
            what="the server to notice the client went away",
        )
        assert _healthy(server.base_url)  # and it keeps serving
        log = server.log.read_text()
    assert "Traceback" not in log
    (line,) = _log_events(server.log, "request.client_gone")
    assert line["level"] == "info"
    assert line["method"] == "POST"
    assert "some-resume-link-token" not in log  # the link's token stays out of the log
