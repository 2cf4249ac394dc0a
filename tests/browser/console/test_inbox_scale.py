"""The inbox with a thousand waiting tasks, in a real browser against a real ``signoff
serve`` (SQLite and PostgreSQL): counts on the tabs, pages walked by keyboard, search,
the "N new" pill of a full view, and Overdue against the producer's deadline."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations
from tests.support import escalation

expect = pytest.importorskip("playwright.sync_api").expect
SEARCHED = "in headline, key fields, entity, reason or AI summary"

#: The task the tests look for among the others.
TARGET = "bulk_0734"
TARGET_REASON = "PAYEE_NAME_MISMATCH"
TARGET_RATIONALE = "The payee's name differs from the sanctioned-list spelling."


def _seed(served: Served, producer: str, count: int) -> None:
    """``count`` waiting tasks ``bulk_0000``… through the API (eight at a time); the
    target among them has a reason code and a summary of its own."""

    def body(number: int) -> dict[str, Any]:
        entity = f"bulk_{number:04d}"
        if entity == TARGET:
            summary = {"recommendation": "REJECT", "rationale": TARGET_RATIONALE}
            return escalation(entity, reason_code=TARGET_REASON, summary=summary)
        return escalation(entity, entity_type="invoice", reason_code="LOW_CONFIDENCE")

    def send(numbers: range) -> None:
        with served.api(producer) as client:
            for number in numbers:
                response = client.post("/tasks/escalate", json=body(number))
                assert response.status_code == 201, response.text

    lanes = 8
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        list(pool.map(send, [range(lane, count, lanes) for lane in range(lanes)]))


def _tab_to(page: Any, name: str, presses: int = 60) -> None:
    """Move the focus with Tab alone until it reaches the link ``name``."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == name:
            return
    raise AssertionError(f"Tab never reached {name!r}")


def _showing(page: Any) -> str:
    return str(page.locator("#showing").inner_text())


def test_a_reviewer_pages_by_keyboard_to_a_task_among_a_thousand_and_new_ones_are_counted(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    _seed(served, producer, 1000)
    ann = signed_in("ann")
    expect(ann.get_by_role("link", name=re.compile(r"^Available \(1,000\)"))).to_be_visible()
    expect(ann.locator("#showing")).to_have_text("Showing 1–50 of 1,000")
    expect(ann.locator("#rows tr[data-task-id]")).to_have_count(50)
    pages = 1
    while ann.locator("#rows").get_by_text(TARGET, exact=True).count() == 0:
        ann.locator("body").focus()
        _tab_to(ann, "Next page")
        ann.keyboard.press("Enter")
        pages += 1
        expect(ann.locator("#showing")).to_have_text(
            f"Showing {(pages - 1) * 50 + 1:,}–{pages * 50:,} of 1,000"
        )
        assert "after=" in ann.url
        assert "view=available" in ann.url
    assert pages > 1  # it was not on the first page
    shown = _showing(ann)
    ann.locator("body").focus()
    _tab_to(ann, "Previous page")
    ann.keyboard.press("Enter")
    expect(ann.locator("#showing")).to_have_text(
        f"Showing {(pages - 2) * 50 + 1:,}–{(pages - 1) * 50:,} of 1,000"
    )
    expect(ann.locator("#rows").get_by_text(TARGET, exact=True)).to_have_count(0)
    ann.go_back()
    expect(ann.locator("#showing")).to_have_text(shown)
    expect(ann.locator("#rows").get_by_text(TARGET, exact=True)).to_be_visible()
    # The view is full and paged: a new task is still counted by the pill.
    served.escalate(producer, entity_id="late_arrival")
    pill = ann.locator("#new-pill")
    expect(pill).to_have_text("1 new — show", timeout=40000)
    pill.click()
    expect(ann.locator("#showing")).to_have_text(shown.replace("of 1,000", "of 1,001"))
    expect(ann.get_by_role("link", name=re.compile(r"^Available \(1,001\)"))).to_be_visible()
    expect(ann.locator("#rows .row-link").first).to_be_focused()


def test_search_finds_a_task_by_entity_id_reason_code_and_summary_words(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    _seed(served, producer, 1000)
    # A task of a group ann is not in: never found by her search.
    served.escalate(
        producer,
        entity_id="bulk_0734_aml",
        assigned_group="aml",
        summary={"recommendation": "REJECT", "rationale": TARGET_RATIONALE},
    )
    ann = signed_in("ann")
    ann.locator("body").focus()
    ann.keyboard.press("/")
    search = ann.get_by_label("Search", exact=True)
    expect(search).to_be_focused()
    for words in (TARGET, TARGET_REASON.lower(), "SANCTIONED-LIST spelling"):
        search = ann.get_by_label("Search", exact=True)
        search.fill(words)
        search.press("Enter")
        expect(ann.locator("#showing")).to_contain_text("Showing 1–1 of 1")
        expect(ann.locator("#rows tr[data-task-id]")).to_have_count(1)
        expect(ann.locator("#rows")).to_contain_text(TARGET)
        assert "q=" in ann.url
    # The search stays in the address: the tabs, the filters and a reload keep it.
    ann.reload()
    expect(ann.get_by_label("Search", exact=True)).to_have_value("SANCTIONED-LIST spelling")
    expect(ann.get_by_role("link", name=re.compile(r"^Available \(1\)"))).to_be_visible()
    ann.get_by_role("link", name=re.compile(r"^Due soon")).click()
    expect(ann.get_by_label("Search", exact=True)).to_have_value("SANCTIONED-LIST spelling")
    # A word every task has: paged like the view itself.
    ann.goto("/console?view=available&q=invoice")
    expect(ann.locator("#showing")).to_have_text(re.compile(r"^Showing 1–50 of 999"))
    ann.goto("/console?view=available&q=no-such-thing")
    expect(ann.locator("#showing")).to_have_text(f"No tasks match “no-such-thing” {SEARCHED}")
    # Bad input is said in words; the view still shows.
    response = ann.goto("/console?view=available&q=" + "x" * 230)
    assert response is not None
    assert response.status == 422
    expect(ann.locator(".notice")).to_contain_text("at most 200 characters")
    expect(ann.locator("#showing")).to_have_text("Showing 1–50 of 1,000")
    response = ann.goto("/console?view=available&after=not-a-page")
    assert response is not None
    assert response.status == 422
    expect(ann.locator(".notice")).to_contain_text("showing its first page")


@pytest.mark.parametrize("sweep_seconds", [0.5])
def test_overdue_means_past_the_producers_deadline_even_after_the_sweeper_escalated(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    task_id = served.escalate(producer, entity_id="late_refund", deadline=soon)
    served.escalate(producer, entity_id="relaxed")
    with served.api() as admin:
        for _ in range(600):  # the sweeper applies level 1 (remind) within its interval
            if admin.get(f"/tasks/{task_id}").json()["escalation_level"] >= 1:
                break
            time.sleep(0.1)
        assert admin.get(f"/tasks/{task_id}").json()["escalation_level"] >= 1
    sue = signed_in("sue", "supervisor")
    expect(sue.get_by_role("link", name=re.compile(r"^Overdue \(1\)"))).to_be_visible()
    sue.get_by_role("link", name=re.compile(r"^Overdue")).click()
    row = sue.locator("#rows tr[data-task-id]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("late_refund")
    expect(row).to_contain_text(re.compile(r"overdue by \d+ (s|min)"))
    expect(row).to_contain_text("level 1")
    sue.get_by_role("link", name=re.compile(r"^Due soon")).click()
    expect(sue.locator("#rows tr[data-task-id]")).to_have_count(1)
    sue.get_by_role("link", name=re.compile(r"^All tasks")).click()
    expect(sue.locator("#rows")).to_contain_text(re.compile(r"relaxed.*due in 23 h", re.S))


def test_the_inbox_with_pages_and_a_search_passes_axe_at_1280_and_375_pixels(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    _seed(served, producer, 60)
    ann = signed_in("ann")
    for width in (1280, 375):
        ann.set_viewport_size({"width": width, "height": 900})
        ann.goto("/console")
        expect(ann.get_by_role("link", name="Next page").first).to_be_visible()
        assert axe_violations(ann) == []
        ann.goto("/console?view=available&q=bulk")
        ann.get_by_role("link", name="Next page").first.click()
        expect(ann.locator("#showing")).to_have_text(
            f"Showing 51–60 of 60 matching “bulk” {SEARCHED}"
        )
        expect(ann.get_by_role("link", name="Previous page").first).to_be_visible()
        assert axe_violations(ann) == []
