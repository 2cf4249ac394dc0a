"""The sign-in pages pass axe-core (no serious or critical violation), fit a 375 px wide
screen, and work with the keyboard alone."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.support import ConsoleServer, accessibility_violations, login

PHONE = {"viewport": {"width": 375, "height": 740}}


def _fits(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_login_page_with_and_without_an_error(
    open_page: Callable[..., Page], console_server: ConsoleServer
) -> None:
    page = open_page(console_server, **PHONE)
    page.goto("/console/login")
    assert accessibility_violations(page) == []
    assert _fits(page)
    page.get_by_label("Username", exact=True).fill("nobody")
    page.get_by_label("Password", exact=True).fill("wrong password")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_be_visible()
    assert accessibility_violations(page) == []
    assert _fits(page)


def test_set_password_and_account_pages(
    open_page: Callable[..., Page], console_server: ConsoleServer
) -> None:
    principal_id = f"a11y-{uuid.uuid4().hex[:8]}"
    with console_server.admin() as admin:
        created = admin.post("/users", json={"principal_id": principal_id, "role": "reviewer"})
    page = open_page(console_server, **PHONE)
    page.goto(created.json()["set_password_link"])
    assert accessibility_violations(page) == []
    assert _fits(page)
    # Keyboard only: type, Tab, type, Enter.
    expect(page.get_by_label("New password")).to_be_focused()
    page.keyboard.type("a long enough password")
    page.keyboard.press("Tab")
    page.keyboard.type("a different password!")
    page.keyboard.press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("The two passwords differ")
    assert accessibility_violations(page) == []
    page.get_by_label("New password").fill("a long enough password")
    page.get_by_label("Repeat the password").fill("a long enough password")
    page.get_by_label("Repeat the password").press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Your password is set")
    login(page, principal_id, "a long enough password")
    page.goto("/console/account")
    assert accessibility_violations(page) == []
    assert _fits(page)
    # Sign out with the keyboard: Tab until the button has focus, then Enter.
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == "Sign out":
            break
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("You are signed out")
