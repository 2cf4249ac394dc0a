"""Asking for changes in the console: notes and the fields to change, the task shown as
waiting on its producer, and the next revision reviewed with the diff and the feedback side
by side. On both engines, axe at 1280 and 375 px."""

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


def test_changes_asked_for_in_the_console_come_back_beside_the_next_revision(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    ann.get_by_label("Notes").fill("Close, but not yet.")
    ann.get_by_label("Open the next task after deciding").uncheck()
    fields = ann.get_by_label("Fields to change (optional, with Request revision)")
    # A line the rules refuse: said on the page, nothing recorded.
    fields.fill("title Name the quarter")
    ann.get_by_role("button", name="Request revision").click()
    ann.get_by_role("button", name="Confirm").click()
    refused = ann.locator(".notice.error")
    expect(refused).to_have_attribute("data-error-code", "ERR_VALIDATION")
    expect(refused).to_contain_text("not valid")
    ann.get_by_label("Notes").fill("Close, but not yet.")
    ann.get_by_label("Open the next task after deciding").uncheck()
    fields.fill("/title Name the quarter\n/body Cite the source of the 12%")
    ann.get_by_role("button", name="Request revision").click()
    ann.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_text("Decision recorded: REVISION_REQUESTED.")).to_be_visible()
    expect(ann.locator("#awaiting-producer")).to_contain_text("Waiting on the producer")
    panel = ann.locator("#change-request")
    expect(panel).to_contain_text("Sent back to the producer on revision 1 by ann")
    expect(panel.locator("li")).to_have_text(
        ["/title: Name the quarter", "/body: Cite the source of the 12%"]
    )
    assert axe_violations(ann) == []
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
        assert task["awaiting"] == "producer"
        assert [f["path"] for f in task["change_request"]["fields"]] == ["/title", "/body"]
        revised = api.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": SUBJECT | {"title": "Q3 results"}},
        )
    assert revised.status_code == 200, revised.text
    # The reviewer who asked: what changed since, and her feedback beside it.
    ann.goto(f"/console/tasks/{task_id}")
    expect(ann.locator(".changed-since table.diff")).to_contain_text("Q3 results")
    expect(ann.locator("#change-request")).to_contain_text("/title: Name the quarter")
    # Another reviewer, on a phone: the diff and the feedback it answers, side by side.
    bob = signed_in("bob", width=375)
    bob.goto(f"/console/tasks/{task_id}")
    panel = bob.locator("#change-request")
    expect(panel).to_contain_text("Changes asked for on revision 1 by ann")
    expect(panel).to_contain_text("“Close, but not yet.”")
    expect(bob.locator("#awaiting-producer")).to_have_count(0)
    expect(bob.get_by_role("button", name="Claim")).to_be_visible()
    assert axe_violations(bob) == []


def test_a_reviewer_edits_what_the_producer_allowed_and_approves_the_edit(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT, editable=["/title"])
    ann = signed_in("ann", width=375)
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    edits = ann.get_by_role("group", name="Edit before approving (with Edit and approve)")
    title = edits.get_by_label("/title")
    expect(title).to_have_value("Quarterly results")
    expect(edits.get_by_label("/body")).to_have_count(0)  # not the producer's to give
    assert axe_violations(ann) == []
    title.fill("Q3 results")
    ann.get_by_label("Open the next task after deciding").uncheck()
    ann.get_by_role("button", name="Edit and approve").click()
    ann.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_text("Decision recorded: APPROVED_WITH_EDITS.")).to_be_visible()
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
        assert (task["decision"], task["approved_revision"]) == ("APPROVED_WITH_EDITS", 2)
        revision = api.get(f"/tasks/{task_id}/revisions/2").json()
    assert revision["created_by"] == "ann"
    assert revision["subject"] == SUBJECT | {"title": "Q3 results"}
    ann.set_viewport_size({"width": 1280, "height": 900})
    ann.goto(f"/console/tasks/{task_id}")
    expect(ann.locator("p.state")).to_contain_text("APPROVED_WITH_EDITS by ann")
    assert axe_violations(ann) == []
