"""Compare any two revisions on the task page; the history's "revision N arrived" lines
link to their changes. On both engines, keyboard and axe included."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect

SUBJECT: dict[str, Any] = {
    "title": "Quarterly results",
    "body": "Revenue grew 12% year on year.",
    "actions": [{"id": "publish_article"}],
}


def _revise(served: Served, producer: str, task_id: str, expected: int, **changes: Any) -> None:
    with served.api(producer) as api:
        response = api.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": f'"{expected}"'},
            json={"subject": SUBJECT | changes},
        )
    assert response.status_code == 200, response.text


def test_any_two_revisions_compare_and_the_history_links_each_arrival(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT)
    _revise(served, producer, task_id, 1, title="Quarterly results (revised)")
    _revise(
        served,
        producer,
        task_id,
        2,
        title="Quarterly results (revised)",
        body="Revenue grew 15% year on year.",
    )
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    history = ann.locator("table.history")
    history.get_by_role("link", name="See what changed in revision 2").click()
    comparison = ann.locator("#comparison")
    expect(comparison.locator("caption")).to_have_text("Changes from revision 1 to revision 2")
    expect(comparison).to_contain_text("Title")
    expect(comparison).not_to_contain_text("Body")
    assert axe_violations(ann) == []
    # By keyboard: revision 1 against revision 3, both changes.
    ann.get_by_label("From revision").focus()
    ann.keyboard.press("Home")
    ann.get_by_label("to revision").select_option("3")
    ann.get_by_role("button", name="Compare").press("Enter")
    expect(comparison.locator("caption")).to_have_text("Changes from revision 1 to revision 3")
    expect(comparison).to_contain_text("Title")
    expect(comparison).to_contain_text("Body")
    ann.set_viewport_size({"width": 375, "height": 812})
    assert axe_violations(ann) == []
    ann.goto(f"/console/tasks/{task_id}?compare_from=3&compare_to=3")
    expect(ann.locator("#comparison")).to_have_text(
        "Choose two different revisions between 1 and 3."
    )
    assert axe_violations(ann) == []
