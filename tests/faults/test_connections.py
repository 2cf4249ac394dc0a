"""``signoff serve`` bounds what a connection may hold without a proxy in front: a
connection that never finishes its headers is closed after ``SIGNOFF_HEADER_TIMEOUT_SECONDS``,
one whose body arrives too slowly or not at all is closed (``SIGNOFF_BODY_*``), one that
reads nothing of its answer is aborted (``SIGNOFF_WRITE_TIMEOUT_SECONDS``), and connections
beyond ``SIGNOFF_MAX_CONNECTIONS`` are closed as soon as they open."""

from __future__ import annotations

import json
import socket
import threading
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


#: A body the tricklers announce and never finish.
TRICKLED = (
    b"POST /console/login HTTP/1.1\r\nHost: signoff\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n"
)


def _trickle(sock: socket.socket, stop: threading.Event) -> None:
    """Send :data:`TRICKLED`'s headers, then one byte of body every half second until the
    server closes the connection (or the test ends)."""
    try:
        sock.sendall(TRICKLED)
        while not stop.wait(0.5):
            sock.sendall(b"a")
    except OSError:
        return  # closed by the server


@pytest.mark.parametrize(
    "limits",
    [
        # too slow: 2 bytes a second, where 100 are needed after the first second
        {"SIGNOFF_BODY_MIN_RATE_BYTES": "100", "SIGNOFF_BODY_RATE_GRACE_SECONDS": "1"},
        # not done in time (the rate is not checked)
        {"SIGNOFF_BODY_MIN_RATE_BYTES": "0", "SIGNOFF_BODY_TIMEOUT_SECONDS": "2"},
    ],
    ids=["min-rate", "deadline"],
)
def test_bodies_that_trickle_in_cannot_keep_new_clients_out(
    database_url: str, tmp_path: Path, limits: dict[str, str]
) -> None:
    cap = 20
    env = service_env(
        database_url,
        **{
            "SIGNOFF_MAX_CONNECTIONS": str(cap),
            "SIGNOFF_HEADER_TIMEOUT_SECONDS": "120",
            "SIGNOFF_BODY_TIMEOUT_SECONDS": "120",
        }
        | limits,
    )
    with Server(env, tmp_path / "serve.log") as server:
        stop = threading.Event()
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(cap)]
        tricklers = [threading.Thread(target=_trickle, args=(sock, stop)) for sock in held]
        try:
            for thread in tricklers:
                thread.start()
            # Every slot is taken by a trickler until the server closes them.
            wait_for(lambda: _healthy(server.base_url), seconds=PATIENCE, what="a slot again")
            for sock in held:
                sock.settimeout(PATIENCE)
                assert _closed_by_server(sock)
            # A whole request with a body is still answered under the same limits.
            with _connection(server.port) as whole:
                whole.sendall(
                    b"POST /console/login HTTP/1.1\r\nHost: signoff\r\n"
                    b"Content-Type: application/x-www-form-urlencoded\r\n"
                    b"Content-Length: 22\r\n\r\nusername=ann&password="
                )
                assert whole.recv(1024).startswith(b"HTTP/1.1 ")
        finally:
            stop.set()
            for thread in tricklers:
                thread.join()
            for sock in held:
                sock.close()
        log = server.log.read_text()
    assert "Traceback" not in log


def test_clients_that_never_read_their_answers_are_cut_off(
    database_url: str, tmp_path: Path
) -> None:
    cap = 3
    env = service_env(
        database_url, SIGNOFF_MAX_CONNECTIONS=str(cap), SIGNOFF_WRITE_TIMEOUT_SECONDS="1"
    )
    with Server(env, tmp_path / "serve.log") as server:
        held = []
        try:
            for _ in range(cap):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", server.port))
                # ~16 MB of answers asked for, and none of it read: more than every
                # buffer between the server and this socket holds.
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: signoff\r\n\r\n" * 60)
                held.append(sock)
            wait_for(lambda: _healthy(server.base_url), seconds=PATIENCE, what="a slot again")
        finally:
            for sock in held:
                sock.close()
        log = server.log.read_text()
    assert "Traceback" not in log


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
