"""The real command line, run as a user would: ``signoff serve`` in a subprocess."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support import escalation, example_escalation


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, process: subprocess.Popen[str], base_url: str, output: list[str]) -> None:
        self.process, self.base_url, self.output = process, base_url, output

    def key(self, label: str) -> str:
        for line in self.output:
            match = re.search(label + r".*?: (signoff_\S+)", line)
            if match:
                return match.group(1)
        raise AssertionError(f"{label!r} not printed: {self.output}")


@contextmanager
def serve(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | (
        env or {}
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "signoff", "serve", "--port", str(port), *args],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    output: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"serve exited early with {process.returncode}"
            assert time.monotonic() < deadline, "serve did not start"
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield Served(process, base_url, output)
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=30)
        output.extend(stdout.splitlines())


def test_python_dash_m_signoff_shows_the_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "signoff", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("serve", "migrate", "create-key"):
        assert command in result.stdout


def test_serve_starts_empty_on_sqlite_and_prints_an_admin_key(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        admin_line = served.process.stdout.readline()  # type: ignore[union-attr]
        served.output.append(admin_line)
        admin_key = served.key("Admin API key")
        headers = {"Authorization": f"Bearer {admin_key}"}
        producer = httpx.post(
            f"{served.base_url}/api-keys",
            headers=headers,
            json={"role": "producer", "principal_id": "bot"},
        )
        producer_headers = {"Authorization": f"Bearer {producer.json()['key']}"}
        assert httpx.get(f"{served.base_url}/tasks", headers=producer_headers).json()["items"] == []
        created = httpx.post(
            f"{served.base_url}/tasks/escalate", headers=producer_headers, json=example_escalation()
        )
        assert created.status_code == 201
    assert (tmp_path / "signoff.db").exists()
    # uvicorn drains, then re-raises SIGTERM so the exit status tells how it ended.
    assert served.process.returncode in (0, -signal.SIGTERM)


def test_serve_demo_adds_keys_and_tasks(tmp_path: Path) -> None:
    with serve(tmp_path, "--demo") as served:
        lines = [served.process.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
        served.output.extend(lines)
        reviewer = {"Authorization": f"Bearer {served.key('Demo reviewer key')}"}
        tasks = httpx.get(f"{served.base_url}/tasks", headers=reviewer).json()["items"]
        assert len(tasks) == 3
        assert {t["status"] for t in tasks} == {"PENDING_REVIEW"}


def test_two_processes_on_one_sqlite_file_grant_one_claim(tmp_path: Path) -> None:
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    with serve(tmp_path, env=env) as first, serve(tmp_path, env=env) as second:

        def key(role: str, principal: str) -> dict[str, str]:
            created = httpx.post(
                f"{first.base_url}/api-keys",
                headers=admin,
                json={"role": role, "principal_id": principal},
            )
            return {"Authorization": f"Bearer {created.json()['key']}"}

        producer, reviewer = key("producer", "bot"), key("reviewer", "alice")
        task_id = httpx.post(
            f"{second.base_url}/tasks/escalate", headers=producer, json=escalation()
        ).json()["id"]

        async def race() -> list[int]:
            async with httpx.AsyncClient(headers=reviewer, timeout=60) as client:
                responses = await asyncio.gather(
                    *(
                        client.post(f"{(first, second)[i % 2].base_url}/tasks/{task_id}/claim")
                        for i in range(40)
                    )
                )
            return [r.status_code for r in responses]

        assert Counter(asyncio.run(race())) == {200: 1, 409: 39}


def test_a_plain_postgresql_url_works_as_written(postgres_database: str, tmp_path: Path) -> None:
    assert postgres_database.startswith("postgresql://postgres@")
    # Trust authentication ignores the password; it must never be printed.
    with_password = postgres_database.replace("postgres@", "postgres:hunter2-secret@", 1)
    env = {
        "SIGNOFF_DATABASE_URL": with_password,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000",
    }
    with serve(tmp_path, env=env) as served:
        ready = httpx.get(
            f"{served.base_url}/readyz",
            headers={"Authorization": "Bearer acceptance-admin-key-0000"},
        )
        assert ready.json() == {"status": "ready", "database": "postgresql"}
    assert not (tmp_path / "signoff.db").exists()
    printed = "\n".join(served.output)
    assert "Starting Signoff" in printed
    assert "hunter2-secret" not in printed


def test_several_server_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    with serve(tmp_path, "--workers", "2", env=env) as served:
        created = httpx.post(
            f"{served.base_url}/api-keys",
            headers=admin,
            json={"role": "producer", "principal_id": "bot"},
        )
        producer = {"Authorization": f"Bearer {created.json()['key']}"}

        async def escalate_many() -> list[int]:
            async with httpx.AsyncClient(headers=producer, timeout=60) as client:
                responses = await asyncio.gather(
                    *(
                        client.post(f"{served.base_url}/tasks/escalate", json=escalation())
                        for _ in range(20)
                    )
                )
            return [r.status_code for r in responses]

        assert asyncio.run(escalate_many()) == [201] * 20
        listed = httpx.get(
            f"{served.base_url}/tasks", headers=producer, params={"limit": 50}
        ).json()
        assert len(listed["items"]) == 20
