"""A person chooses how they hear of work on "Your account", by keyboard alone, in a real
browser against a real ``signoff serve`` (SQLite and PostgreSQL); no serious or critical
axe violation at desktop and phone widths."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect


def _focused_id(page: Any) -> str:
    return str(page.evaluate("() => document.activeElement.id || ''"))


def _tab_to_id(page: Any, element_id: str, *, limit: int = 30) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if _focused_id(page) == element_id:
            return
    raise AssertionError(f"#{element_id} is not reachable with Tab")


@pytest.mark.parametrize("width", [1280, 375])
def test_the_notification_choice_is_made_by_keyboard(
    served: Served, signed_in: Any, width: int
) -> None:
    name = f"ann-{uuid.uuid4().hex[:6]}"
    page = signed_in(name, width=width, groups=["payments"])
    page.goto("/console/account")
    group = page.get_by_role("group", name="E-mail me about work waiting for me")
    expect(group.get_by_role("radio", name="Each event as it happens")).to_be_checked()
    assert axe_violations(page) == []

    # Tab reaches the checked choice; arrows move the choice; Tab, then Enter saves.
    _tab_to_id(page, "notify-each")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    expect(group.get_by_role("radio", name="A digest every hour")).to_be_checked()
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent.trim()") == (
        "Save how I am notified"
    )
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/console/account\?notice=notify_saved$"))
    expect(page.get_by_role("status")).to_have_text("Saved. From now on: a digest every hour.")
    expect(
        page.get_by_role("group", name="E-mail me about work waiting for me").get_by_role(
            "radio", name="A digest every hour"
        )
    ).to_be_checked()
    assert axe_violations(page) == []
    with served.api() as admin:
        users = admin.get("/users").json()["items"]
    assert next(u for u in users if u["principal_id"] == name)["notify"] == "1h"

    # A value the page never offers (a tampered form) is refused in words.
    page.evaluate("() => { document.querySelector('#notify-none').value = '7m'; }")
    page.get_by_role("radio", name="No e-mail (the work is still in the console)").check()
    page.get_by_role("button", name="Save how I am notified").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Nothing was changed: choose one of")
    assert "ERR_" not in page.locator("main").inner_text()
    assert axe_violations(page) == []
