"""The TypeScript SDK against a real ``signoff serve`` on SQLite and PostgreSQL: the
README loop, the execution gate race, a 2-of-3 vote, catch-up, a verified webhook
delivery, the OpenAI Agents adapter's tools through the execution gate
(``sdk/typescript/test/server``), and a wait that outlives a SIGTERM and a SIGKILL of
the server."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.faults.harness import service_env
from tests.processes import Server, wait_for
from tests.support import ADMIN_KEY
from tests.typescript import BUILT_TESTS, PACKAGE, build, node

#: How long the server stays down each time: beyond one request's retries.
OUTAGE_SECONDS = 6


@pytest.fixture(scope="module")
def built() -> None:
    build()


def _env(server: Server) -> dict[str, str]:
    return {"SIGNOFF_TEST_URL": server.base_url, "SIGNOFF_TEST_ADMIN_KEY": ADMIN_KEY}


def test_the_sdk_works_against_the_server(built: None, database_url: str, tmp_path: Path) -> None:
    with Server(service_env(database_url), tmp_path / "serve.log") as server:
        files = [
            str(BUILT_TESTS / "server" / name) for name in ("loop.test.js", "webhooks.test.js")
        ]
        output = node("--test", "--test-reporter=spec", *files, env=_env(server))
    assert "# fail 0" in output or "ℹ fail 0" in output, output
    for name in ("README", "exactly one runs", "2-of-3 vote", "signed delivery"):
        assert name in output, output


def test_the_agents_adapter_runs_tools_through_the_gate(
    built: None, database_url: str, tmp_path: Path
) -> None:
    with Server(service_env(database_url), tmp_path / "serve.log") as server:
        test_file = str(BUILT_TESTS / "server" / "agents.test.js")
        output = node("--test", "--test-reporter=spec", test_file, env=_env(server))
    assert "# fail 0" in output or "ℹ fail 0" in output, output
    for name in ("rejected never runs", "other than the approved", "at once", "failed runs again"):
        passed = [line for line in output.splitlines() if line.lstrip().startswith("✔")]
        assert any(name in line for line in passed), output


def _line(stream: IO[str]) -> dict[str, Any]:
    line = stream.readline()
    assert line, "the waiting program ended early"
    return json.loads(line)  # type: ignore[no-any-return]


def _parked(base_url: str) -> int:
    """How many long-polls the server holds now (its own gauge)."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    text = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10).text
    values = [float(line.split()[-1]) for line in text.splitlines()
              if line.startswith("signoff_long_poll_waiters")]  # fmt: skip
    return int(sum(values))


def _decide(base_url: str, task_id: str) -> None:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as a:
        made = a.post("/api-keys", json={"role": "reviewer", "principal_id": "restart-reviewer"})
        reviewer = {"Authorization": f"Bearer {made.json()['key']}"}
        lease = a.post(f"/tasks/{task_id}/claim", headers=reviewer).json()
        body = {
            "decision": "APPROVED",
            "revision": lease["current_revision"],
            "digest": lease["digest"],
        }
        resolved = a.post(f"/tasks/{task_id}/resolve", json=body,
                          headers={**reviewer, "X-Lease-Token": lease["lease_token"]})  # fmt: skip
        assert resolved.status_code == 200, resolved.text


def test_a_wait_outlives_a_sigterm_and_a_kill_of_the_server(
    built: None, database_url: str, tmp_path: Path
) -> None:
    server = Server(service_env(database_url), tmp_path / "serve.log")
    with server:
        waiter = subprocess.Popen(
            ["node", str(BUILT_TESTS / "server" / "wait-program.js")],
            cwd=PACKAGE,
            env={**os.environ, **_env(server)},
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert waiter.stdout is not None
            task_id = _line(waiter.stdout)["task_id"]
            wait_for(lambda: _parked(server.base_url) >= 1, what="the wait parked")
            assert server.terminate() in (0, -15)
            time.sleep(OUTAGE_SECONDS)
            server.start()
            wait_for(lambda: _parked(server.base_url) >= 1, what="the wait parked again")
            server.kill()
            time.sleep(OUTAGE_SECONDS)
            server.start()
            wait_for(lambda: _parked(server.base_url) >= 1, what="the wait parked once more")
            _decide(server.base_url, task_id)
            assert _line(waiter.stdout) == {"decision": "APPROVED"}
            assert waiter.wait(timeout=60) == 0
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait(timeout=10)
