"""Remembered approvals in the console: a reviewer allows the same action again while
approving, the next matching escalation is approved at once, and a supervisor lists and
revokes the grant. On both engines, axe at 1280 and 375 px."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect

SUBJECT: dict[str, Any] = {"title": "Refund 40 EUR", "actions": [{"id": "refund"}]}


@pytest.fixture
def served_env() -> dict[str, str]:
    return {"SIGNOFF_GRANT_AUDIT_SHARE": "0"}  # nothing sampled for audit here


def test_an_approval_remembered_in_the_console_is_listed_and_revoked(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    ann.get_by_label("Allow the same action again without asking (with an approval)").select_option(
        label="For 1 hour"
    )
    ann.get_by_label("Open the next task after deciding").uncheck()
    ann.get_by_role("button", name="Approve").click()
    ann.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_text("Decision recorded: APPROVED.")).to_be_visible()
    again = served.escalate(producer, subject=SUBJECT)
    with served.api(producer) as api:
        task = api.get(f"/tasks/{again}").json()
    assert (task["status"], task["decision"]) == ("RESOLVED", "APPROVED_BY_GRANT")

    sam = signed_in("sam", role="supervisor", width=375)
    sam.get_by_role("link", name="Remembered approvals").click()
    row = sam.locator(f"#grant-{task['grant_id']}")
    expect(row).to_contain_text("bot · transaction · AML_RULE_FAILED")
    expect(row).to_contain_text("ann")
    expect(row.locator("td").nth(3)).to_have_text("1")
    assert axe_violations(sam) == []
    row.get_by_role("button", name="Revoke").click()
    expect(sam.get_by_role("status")).to_have_text(
        "Revoked. Matching escalations now go to a person."
    )
    expect(row).to_contain_text("revoked by sam")
    sam.set_viewport_size({"width": 1280, "height": 900})
    assert axe_violations(sam) == []
    later = served.escalate(producer, subject=SUBJECT)
    with served.api(producer) as api:
        assert api.get(f"/tasks/{later}").json()["status"] == "PENDING_REVIEW"
    # A reviewer has no such page.
    ann.goto("/console/grants")
    expect(ann.locator("main")).to_contain_text("supervisor")
