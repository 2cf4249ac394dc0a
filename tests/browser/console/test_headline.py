"""What is being approved, first: the headline and key fields in the inbox row, at the top
of the task page and in the first screen at desktop and phone sizes, inside the
confirmation, and found by the search (payee and amount), on both engines."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect

PAYMENT: dict[str, Any] = {
    "amount": 12500,
    "currency": "EUR",
    "payee": {"name": "ACME Ltd"},
    "value_date": "2026-12-24",
    "memo": "<b>urgent</b> wire",
    "actions": [{"id": "release_payment"}],
}
HEADLINE: dict[str, Any] = {
    "title": "Release {/amount} to {/payee/name}",
    "fields": [
        {"label": "Amount", "pointer": "/amount", "type": "money", "currency": "EUR"},
        {"label": "Payee", "pointer": "/payee/name", "type": "person"},
        {"label": "Value date", "pointer": "/value_date", "type": "date"},
        {"label": "Memo", "pointer": "/memo", "type": "text"},
    ],
}
TITLE = "Release €12,500.00 to ACME Ltd"
SEARCHED = "in headline, key fields, entity, reason or AI summary"


def _in_first_screen(page: Any, locator: Any) -> None:
    box = locator.bounding_box()
    height = page.viewport_size["height"]
    assert box is not None
    assert box["y"] >= 0, box
    assert box["y"] + box["height"] <= height, (box, height)


def _escalate_payment(
    served: Served, producer: str, extra: dict[str, Any] | None = None, **changes: Any
) -> str:
    subject = copy.deepcopy(PAYMENT) | changes
    return served.escalate(
        producer, subject=subject, headline=copy.deepcopy(HEADLINE), **(extra or {})
    )


@pytest.mark.parametrize("size", [(1280, 900), (375, 812)])
def test_the_headline_key_fields_and_buttons_are_the_first_screen_and_in_the_confirmation(
    served: Served, signed_in: Any, size: tuple[int, int]
) -> None:
    producer = served.key("producer", "payments-bot")
    # A long AI recommendation comes after the headline: it never pushes it down.
    summary = {"recommendation": "APPROVE", "rationale": "Known payee, usual amount. " * 40}
    task_id = _escalate_payment(served, producer, {"summary": summary})
    ann = signed_in("ann")
    ann.set_viewport_size({"width": size[0], "height": size[1]})
    ann.goto("/console")
    row = ann.locator(f"tr[data-task-id='{task_id}']")
    expect(row.locator(".headline")).to_have_text(TITLE)
    expect(row).to_contain_text("Payee: ACME Ltd")
    assert axe_violations(ann) == []
    ann.goto(f"/console/tasks/{task_id}")
    expect(ann.locator("h1#headline")).to_have_text(TITLE)
    fields = ann.get_by_label("Key fields")
    expect(fields).to_contain_text("€12,500.00")
    expect(fields).to_contain_text("December 24, 2026")
    expect(fields).to_contain_text("<b>urgent</b> wire")  # markup shown as text
    ann.keyboard.press("c")
    approve = ann.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_enabled()
    for part in (ann.locator("h1#headline"), fields, approve):
        _in_first_screen(ann, part)
    assert axe_violations(ann) == []
    ann.keyboard.press("a")
    confirm = ann.locator("#confirm-text")
    expect(confirm).to_contain_text(f"Approve “{TITLE}” (revision 1)?")
    _in_first_screen(ann, confirm)
    assert axe_violations(ann) == []
    ann.keyboard.press("Escape")
    expect(ann.locator("#confirm")).to_be_hidden()


def test_the_search_finds_by_payee_and_by_amount_and_says_where_it_looked(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "payments-bot")
    acme = _escalate_payment(served, producer)
    other = _escalate_payment(served, producer, amount=990, payee={"name": "Globex"})
    ann = signed_in("ann")
    for words, found, hidden in (
        ("acme", acme, other),
        ("12,500", acme, other),
        ("globex", other, acme),
        ("990", other, acme),
    ):
        ann.goto("/console")
        ann.get_by_label("Search", exact=True).fill(words)
        ann.keyboard.press("Enter")
        expect(ann.locator("#showing")).to_have_text(
            f"Showing 1–1 of 1 matching “{words}” {SEARCHED}"
        )
        expect(ann.locator(f"tr[data-task-id='{found}']")).to_be_visible()
        expect(ann.locator(f"tr[data-task-id='{hidden}']")).to_have_count(0)
    assert axe_violations(ann) == []
