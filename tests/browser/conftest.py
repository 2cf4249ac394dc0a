"""Browser tests: a real ``signoff serve`` process and Debian's chromium, through Playwright.

Fixtures for every console test:

- ``console_server`` — ``signoff serve`` in a subprocess on a free port, once per engine
  (SQLite and PostgreSQL) per test module; tests make their own users
  (``console_server.create_user(...)``) and keys (``console_server.api_key(...)``) with
  fresh names, so they never see each other's data.
- ``serve_console(engine, tmp_path, **env)`` — a server of your own, with settings of your
  own (``SIGNOFF_LEASE_SECONDS="5"``…); a context manager.
- ``browser`` — chromium, headless (``SIGNOFF_TEST_CHROMIUM`` overrides the path).
- ``page`` — a fresh browser context (its own cookies) on ``console_server``;
  ``open_page(server)`` makes more (two reviewers in two browsers).
- ``login(page, user, password)`` (``from tests.browser.support import login``) — signs
  in through the login page and waits until it has been left.

Playwright's sync API keeps an event loop running on the main thread while it is open,
so ``asyncio.run`` there fails: these fixtures live per module (never past the browser
tests), and ``tests.browser.support.run_async`` runs a coroutine on another thread.

Chromium comes from Debian (``apt-get install chromium``): never ``playwright install``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from tests.browser.support import CHROMIUM, ConsoleServer, serve_console
from tests.conftest import ENGINES


@pytest.fixture(scope="module", params=ENGINES)
def console_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleServer]:
    engine = str(request.param)
    with serve_console(engine, tmp_path_factory.mktemp(f"console-{engine}")) as server:
        yield server


@pytest.fixture(scope="module")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="module")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    browser = playwright_instance.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
    )
    yield browser
    browser.close()


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[..., Page]]:
    """``open_page(server, **context_options)``: a page in a new browser context (its own
    cookies), closed after the test."""
    contexts = []

    def open_(server: ConsoleServer, **options: Any) -> Page:
        context = browser.new_context(base_url=server.base_url, **options)
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield open_
    for context in contexts:
        context.close()


@pytest.fixture
def page(open_page: Callable[..., Page], console_server: ConsoleServer) -> Page:
    return open_page(console_server)
