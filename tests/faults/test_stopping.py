"""SIGTERM answers every parked long-poll and ends every event stream at once, so the
server exits long before its graceful wait would allow; ``serve --workers N`` exits by
SIGTERM like one process, and its processes stop when their parent is killed alone."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import httpx

from tests.faults.harness import service_env
from tests.integration.test_console_auth import PASSWORD, _csrf
from tests.processes import Process, Server, wait_for
from tests.support import ADMIN_KEY, escalation

PARKED = 5
#: Far longer than the test waits for the exit: only the drain can explain a prompt one.
SHUTDOWN_WAIT = "90"


def _keys(base_url: str) -> dict[str, str]:
    keys = {}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as a:
        for role, principal in (("producer", "bot"), ("reviewer", "ann-key")):
            response = a.post("/api-keys", json={"role": role, "principal_id": principal})
            assert response.status_code == 201, response.text
            keys[principal] = response.json()["key"]
        created = a.post(
            "/users", json={"principal_id": "ann", "role": "reviewer", "password": PASSWORD}
        )
        assert created.status_code == 201, created.text
    return keys


def _signed_in(base_url: str) -> httpx.Client:
    browser = httpx.Client(base_url=base_url, timeout=120)
    page = browser.get("/console/login")
    signed_in = browser.post(
        "/console/login",
        data={"username": "ann", "password": PASSWORD, "csrf": _csrf(page.text)},
    )
    assert signed_in.status_code == 303, signed_in.text
    return browser


def test_sigterm_answers_parked_long_polls_and_ends_event_streams_at_once(
    database_url: str, tmp_path: Path
) -> None:
    env = service_env(database_url, SIGNOFF_SHUTDOWN_WAIT_SECONDS=SHUTDOWN_WAIT)
    with Server(env, tmp_path / "serve.log") as server:
        keys = _keys(server.base_url)
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {keys['bot']}"}
        ) as producer:
            task = producer.post("/tasks/escalate", json=escalation()).json()
        answers: list[httpx.Response] = []
        streamed: list[str] = []
        stream_open = threading.Event()

        def long_poll() -> None:
            with httpx.Client(
                base_url=server.base_url,
                headers={"Authorization": f"Bearer {keys['ann-key']}"},
                timeout=120,
            ) as client:
                answers.append(client.get(f"/tasks/{task['id']}", params={"wait": 60}))

        def stream() -> None:
            browser = _signed_in(server.base_url)
            try:
                with browser.stream(
                    "GET", "/console/events", headers={"Accept": "text/event-stream"}
                ) as events:
                    assert events.status_code == 200
                    stream_open.set()
                    streamed.extend(events.iter_text())  # returns once the server ends it
            finally:
                browser.close()

        waiters = [threading.Thread(target=long_poll) for _ in range(PARKED)]
        for waiter in waiters:
            waiter.start()
        wait_for(lambda: _parked(server.base_url) >= PARKED, seconds=60, what="parked long-polls")
        waiters.append(threading.Thread(target=stream))
        waiters[-1].start()
        assert stream_open.wait(60)
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        # Well before the graceful wait (90 s) and the long-polls' own wait (60 s).
        code = server.process.wait(timeout=45)
        for waiter in waiters:
            waiter.join(timeout=30)
        log = server.log.read_text()
    assert code in (0, -signal.SIGTERM)
    assert len(answers) == PARKED
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "PENDING_REVIEW"  # the "not yet decided" answer
    # Ended by the stop, before its first heartbeat (10 s) or its own end (20 s).
    assert "retry:" in "".join(streamed)
    assert "keep-alive" not in "".join(streamed)
    assert not any(thread.is_alive() for thread in waiters)
    assert "Traceback" not in log
    assert "Application shutdown complete" in log


def _parked(base_url: str) -> int:
    metrics = httpx.get(
        f"{base_url}/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ).text
    for line in metrics.splitlines():
        if line.startswith("signoff_long_poll_waiters "):
            return int(float(line.split()[1]))
    return 0


def _workers(env: dict[str, str], log: Path, port: int) -> Process:
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    return Process(args, env, log)


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(line) for line in found.stdout.split()]


def test_serve_with_workers_exits_by_sigterm_and_its_processes_follow_a_killed_parent(
    database_url: str, tmp_path: Path
) -> None:
    from tests.pgcluster import free_port

    env = service_env(database_url)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with _workers(env, tmp_path / "first.log", port) as first:
        wait_for(lambda: _answers(base_url), seconds=60, what="serve --workers 2")
        assert first.terminate(seconds=60) == -signal.SIGTERM  # 143 in a shell
    with _workers(env, tmp_path / "second.log", port) as second:
        wait_for(lambda: _answers(base_url), seconds=60, what="serve --workers 2 again")
        wait_for(lambda: len(_children(second.pid)) >= 2, seconds=30, what="two processes")
        children = _children(second.pid)
        os.kill(second.pid, signal.SIGKILL)  # the parent alone
        second.process.wait(timeout=30)  # type: ignore[union-attr]
        wait_for(
            lambda: not any(_alive(child) for child in children),
            seconds=45,
            what="the orphaned processes to stop",
        )
    with _workers(env, tmp_path / "third.log", port) as third:  # the port is free again
        wait_for(lambda: _answers(base_url), seconds=60, what="a restart on the same port")
        assert third.terminate(seconds=60) == -signal.SIGTERM


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False
