"""Browser fixtures for the console pages: a real ``signoff serve`` (SQLite or PostgreSQL,
per the ``engine`` parameter), Debian's Chromium driven by Playwright (never
``playwright install``), users signed in through the login page.

``SIGNOFF_LEASE_SECONDS`` can be shortened per test with
``@pytest.mark.parametrize("lease_seconds", [5])``: the countdown then lapses on the real
clock, as a reviewer would see it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import reset_postgres
from tests.support import ADMIN_KEY, escalation

playwright_api = pytest.importorskip("playwright.sync_api")
# A loaded CI machine (2 cores, several servers) can take longer than Playwright's 5 s.
playwright_api.expect.set_options(timeout=15_000)

CHROMIUM = (
    os.environ.get("SIGNOFF_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
)
PASSWORD = "correct horse battery staple"
AXE = Path(__file__).resolve().parents[2] / "node" / "node_modules" / "axe-core" / "axe.min.js"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """A running ``signoff serve`` and an admin API client for setting the scene."""

    base_url: str
    process: subprocess.Popen[bytes]

    def api(self, key: str = ADMIN_KEY) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def key(self, role: str, principal_id: str) -> str:
        with self.api() as admin:
            response = admin.post("/api-keys", json={"role": role, "principal_id": principal_id})
        assert response.status_code == 201, response.text
        return str(response.json()["key"])

    def user(
        self, principal_id: str, role: str = "reviewer", groups: list[str] | None = None
    ) -> str:
        body = {
            "principal_id": principal_id,
            "role": role,
            "email": f"{principal_id}@example.com",
            "groups": groups or [],
            "password": PASSWORD,
        }
        with self.api() as admin:
            response = admin.post("/users", json=body)
        assert response.status_code == 201, response.text
        return principal_id

    def escalate(self, producer_key: str, **overrides: Any) -> str:
        body = escalation(overrides.pop("entity_id", None) or f"e-{uuid.uuid4().hex[:8]}")
        body.update(overrides)
        with self.api(producer_key) as producer:
            response = producer.post("/tasks/escalate", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["task_id"])


@pytest.fixture
def database_url(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """As the root fixture, but set up in a worker thread: Playwright's synchronous API
    keeps an event loop running in this one, where ``asyncio.run`` refuses to start."""
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 'signoff.db'}"

    def prepare() -> str:
        url: str = request.getfixturevalue("postgres_database")
        reset_postgres(url)
        return url

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(prepare).result()


@pytest.fixture
def lease_seconds() -> int:
    return 900


@pytest.fixture
def served_env() -> dict[str, str]:
    """More settings for the server (a test module overrides it: an SMTP server, say)."""
    return {}


@pytest.fixture
def sweep_seconds() -> float:
    """The sweeper's interval (``@pytest.mark.parametrize("sweep_seconds", [1])`` to see
    deadlines pass sooner)."""
    return 15


@pytest.fixture
def served(
    database_url: str,
    tmp_path: Path,
    lease_seconds: int,
    sweep_seconds: float,
    served_env: dict[str, str],
) -> Iterator[Served]:
    port = _free_port()
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_LEASE_SECONDS": str(lease_seconds),
        "SIGNOFF_SWEEP_INTERVAL_SECONDS": str(sweep_seconds),
        "SIGNOFF_SECRET_KEY": "browser-tests-" + uuid.uuid4().hex,
        "SIGNOFF_LOG_LEVEL": "warning",
        **served_env,
    }
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "signoff", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError((tmp_path / "serve.log").read_text())
        time.sleep(0.1)
    try:
        yield Served(base_url, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture
def chromium() -> Iterator[Any]:
    """One browser per test: Playwright's event loop then never outlives the test (the
    session's database fixtures use ``asyncio.run`` when they finish)."""
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield browser
        browser.close()


@pytest.fixture
def signed_in(chromium: Any, served: Served) -> Iterator[Callable[..., Any]]:
    """``signed_in("ann", role="reviewer", width=1280)`` → a Playwright page of a fresh
    browser context, signed in as a new user ``ann``."""
    contexts: list[Any] = []

    def open_as(principal_id: str, role: str = "reviewer", *, width: int = 1280, **kw: Any) -> Any:
        served.user(principal_id, role, **kw)
        context = chromium.new_context(
            base_url=served.base_url, viewport={"width": width, "height": 900}
        )
        context.set_default_timeout(15000)
        contexts.append(context)
        page = context.new_page()
        page.goto("/console/login")
        page.get_by_label("Username").fill(principal_id)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/console")
        return page

    yield open_as
    for context in contexts:
        context.close()


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """Serious and critical axe-core violations on the page (axe injected from the local
    npm install, nothing fetched)."""
    # Evaluated, not added as a <script>: the pages' policy allows no inline script.
    page.evaluate(AXE.read_text(encoding="utf-8"))
    result = page.evaluate("async () => (await axe.run(document)).violations")
    return [v for v in result if v.get("impact") in ("serious", "critical")]
