"""Answers beyond yes and no in the console, one scenario on one server per engine:
asking for changes (notes and the fields to change, the task shown as waiting on its
producer, the next revision reviewed with the diff and the feedback side by side), editing
what the producer allowed and approving the edit, and remembering an approval (allowed
again while approving, listed and revoked by a supervisor). Axe at 1280 and 375 px."""

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
REFUND: dict[str, Any] = {"title": "Refund 40 EUR", "actions": [{"id": "refund"}]}


@pytest.fixture
def served_env() -> dict[str, str]:
    return {"SIGNOFF_GRANT_AUDIT_SHARE": "0"}  # nothing sampled for audit here


def test_answers_beyond_yes_and_no_in_the_console(served: Served, signed_in: Any) -> None:
    asking_for_changes(served, signed_in)
    editing_then_approving(served, signed_in)
    remembering_an_approval(served, signed_in)


def asking_for_changes(served: Served, signed_in: Any) -> None:
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


def editing_then_approving(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT, editable=["/title"])
    dan = signed_in("dan", width=375)
    dan.goto(f"/console/tasks/{task_id}")
    dan.get_by_role("button", name="Claim").click()
    edits = dan.get_by_role("group", name="Edit before approving (with Edit and approve)")
    title = edits.get_by_label("/title")
    expect(title).to_have_value("Quarterly results")
    expect(edits.get_by_label("/body")).to_have_count(0)  # not the producer's to give
    assert axe_violations(dan) == []
    dan.get_by_label("Open the next task after deciding").uncheck()
    title.fill("Q3 results")
    # By keyboard: leave the field, the edit's own key, Enter confirms.
    dan.keyboard.press("Escape")
    dan.keyboard.press("d")
    expect(dan.locator("#confirm-text")).to_contain_text("Edit and approve")
    dan.keyboard.press("Enter")
    expect(dan.get_by_text("Decision recorded: APPROVED_WITH_EDITS.")).to_be_visible()
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
        assert (task["decision"], task["approved_revision"]) == ("APPROVED_WITH_EDITS", 2)
        revision = api.get(f"/tasks/{task_id}/revisions/2").json()
    assert revision["created_by"] == "dan"
    assert revision["subject"] == SUBJECT | {"title": "Q3 results"}
    dan.set_viewport_size({"width": 1280, "height": 900})
    dan.goto(f"/console/tasks/{task_id}")
    expect(dan.locator("p.state")).to_contain_text("APPROVED_WITH_EDITS by dan")
    assert axe_violations(dan) == []


def remembering_an_approval(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=REFUND)
    cleo = signed_in("cleo")
    cleo.goto(f"/console/tasks/{task_id}")
    cleo.get_by_role("button", name="Claim").click()
    cleo.get_by_label(
        "Allow the same action again without asking (with an approval)"
    ).select_option(label="For 1 hour")
    cleo.get_by_label("Open the next task after deciding").uncheck()
    cleo.get_by_role("button", name="Approve").click()
    cleo.get_by_role("button", name="Confirm").click()
    expect(cleo.get_by_text("Decision recorded: APPROVED.")).to_be_visible()
    again = served.escalate(producer, subject=REFUND)
    with served.api(producer) as api:
        task = api.get(f"/tasks/{again}").json()
    assert (task["status"], task["decision"]) == ("RESOLVED", "APPROVED_BY_GRANT")

    sam = signed_in("sam", role="supervisor", width=375)
    sam.get_by_role("link", name="Remembered approvals").click()
    row = sam.locator(f"#grant-{task['grant_id']}")
    expect(row).to_contain_text("bot · transaction · AML_RULE_FAILED")
    expect(row).to_contain_text("cleo")
    expect(row.locator("td").nth(3)).to_have_text("1")
    assert axe_violations(sam) == []
    row.get_by_role("button", name="Revoke").click()
    expect(sam.get_by_role("status")).to_have_text(
        "Revoked. Matching escalations now go to a person."
    )
    expect(row).to_contain_text("revoked by sam")
    sam.set_viewport_size({"width": 1280, "height": 900})
    assert axe_violations(sam) == []
    later = served.escalate(producer, subject=REFUND)
    with served.api(producer) as api:
        assert api.get(f"/tasks/{later}").json()["status"] == "PENDING_REVIEW"
    # A reviewer has no such page.
    cleo.goto("/console/grants")
    expect(cleo.locator("main")).to_contain_text("supervisor")
