"""Helpers for browser tests: ``signoff serve`` in a subprocess, users, signing in."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from playwright.sync_api import Page

from tests.conftest import POSTGRES_URL, _server_url

ADMIN_KEY = "browser-admin-key-0123456789abcdef"
SECRET_KEY = "browser-secret-key-0123456789abcdef"
PASSWORD = "correct horse battery staple"
CHROMIUM = os.environ.get("SIGNOFF_TEST_CHROMIUM", "/usr/bin/chromium")


@dataclass(frozen=True)
class User:
    principal_id: str
    password: str
    role: str
    email: str | None = None


def run_async(coroutine: Any) -> Any:
    """``asyncio.run`` on another thread (Playwright's sync API owns this one's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _admin_sql(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRES_URL)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ConsoleServer:
    """``signoff serve`` in a subprocess."""

    def __init__(self, database_url: str, log_path: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.database_url = database_url
        self.log_path = log_path
        environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        environment |= {
            "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
            "SIGNOFF_SECRET_KEY": SECRET_KEY,
            "SIGNOFF_PUBLIC_BASE_URL": self.base_url,
            "SIGNOFF_LOG_LEVEL": "warning",
        }
        environment |= env
        self.env = environment
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "signoff",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--database-url",
                database_url,
            ],
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"signoff serve exited:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # waiting for a process to listen, not standing in for a clock
        raise RuntimeError(f"signoff serve did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
        )

    def create_user(
        self,
        role: str = "reviewer",
        *,
        groups: list[str] | None = None,
        principal_id: str | None = None,
        password: str | None = PASSWORD,
        email: str | None = None,
    ) -> User:
        """A local user with a password (a fresh name unless given)."""
        principal_id = principal_id or f"{role}-{uuid.uuid4().hex[:8]}"
        body: dict[str, Any] = {"principal_id": principal_id, "role": role, "groups": groups or []}
        if email:
            body["email"] = email
        if password:
            body["password"] = password
        with self.admin() as admin:
            response = admin.post("/users", json=body)
        assert response.status_code == 201, response.text
        return User(principal_id, password or "", role, email)

    def api_key(self, role: str, principal_id: str | None = None, **extra: Any) -> str:
        """A new API key's secret (e.g. a producer's, to escalate tasks)."""
        principal_id = principal_id or f"{role}-{uuid.uuid4().hex[:8]}"
        with self.admin() as admin:
            response = admin.post(
                "/api-keys", json={"role": role, "principal_id": principal_id, **extra}
            )
        assert response.status_code == 201, response.text
        return str(response.json()["key"])

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )


@contextmanager
def serve_console(engine: str, tmp_path: Path, **env: str) -> Iterator[ConsoleServer]:
    """A fresh database of ``engine`` and ``signoff serve`` on it, with ``env`` added."""
    name = f"signoff_browser_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    if engine == "sqlite":
        url = f"sqlite:///{tmp_path / (name + '.db')}"
    else:
        run_async(_admin_sql(f'CREATE DATABASE "{name}"'))
        url = _server_url(name)
    server = ConsoleServer(url, tmp_path / f"{name}.log", env)
    try:
        yield server
    finally:
        server.stop()
        if engine != "sqlite":
            run_async(_admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def login(page: Page, user: User | str, password: str | None = None) -> None:
    """Sign in through the login page (as a person would) and wait until it is left."""
    principal_id = user.principal_id if isinstance(user, User) else user
    if password is None:
        password = user.password if isinstance(user, User) else PASSWORD
    page.goto("/console/login")
    page.get_by_label("Username").fill(principal_id)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(lambda url: "/console/login" not in url)


AXE = Path(__file__).resolve().parents[1] / "node" / "node_modules" / "axe-core" / "axe.min.js"


def accessibility_violations(
    page: Page, impacts: tuple[str, ...] = ("serious", "critical")
) -> list[str]:
    """axe-core's violations of ``impacts`` on the page as it is now, one line each
    (``[]`` when there are none). axe-core comes from the local npm install
    (``tests/node``); nothing is fetched."""
    # Evaluated, not added as a <script>: the pages' policy allows no inline script.
    page.evaluate(AXE.read_text(encoding="utf-8"))
    violations = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — "
        + "; ".join(str(node.get("target")) for node in v.get("nodes", [])[:3])
        for v in violations
        if v.get("impact") in impacts
    ]
