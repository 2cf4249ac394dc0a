"""A task decided by votes in the console: its progress, who voted what, and a vote form
for those who may vote — by keyboard, on both engines, with no serious axe issue."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations
from tests.support import escalation

expect = pytest.importorskip("playwright.sync_api").expect

SUBJECT = {"title": "Pay ACME", "amount": "100 EUR", "actions": [{"id": "pay"}]}


def members(served: Served, **groups: list[str]) -> None:
    """Reviewers with API keys in ``groups``: a rule is accepted only when the people who
    may vote can meet it."""
    with served.api() as admin:
        for who, names in groups.items():
            made = admin.post(
                "/api-keys", json={"role": "reviewer", "principal_id": who, "groups": names}
            )
            assert made.status_code == 201, made.text


def rule_task(served: Served, rule: dict[str, Any] | None = None) -> str:
    members(served, lars=["legal"], finn=["finance"])
    producer = served.key("producer", "bot")
    body = escalation(subject=SUBJECT, approval_rule=rule or {"groups": {"legal": 1, "finance": 1}})
    with served.api(producer) as client:
        made = client.post("/tasks/escalate", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["task_id"])


@pytest.mark.parametrize("width", [1280, 375])
def test_progress_votes_and_the_vote_form(served: Served, signed_in: Any, width: int) -> None:
    task_id = rule_task(served)
    lena = signed_in("lena", groups=["legal"], width=width)
    lena.goto(f"/console/tasks/{task_id}")
    progress = lena.locator("#vote-progress")
    expect(progress).to_have_text(
        "0 of 2 approvals — needs 2 more approvals: 1 from finance and 1 from legal"
    )
    expect(lena.get_by_role("button", name="Claim")).to_have_count(0)
    assert axe_violations(lena) == []
    # Keyboard alone: to the Approve vote button, then Enter.
    approve = lena.get_by_role("button", name="Vote: Approve")
    approve.focus()
    lena.keyboard.press("Enter")
    # The same one confirmation as a single decision, naming what is approved.
    confirm = lena.locator("#confirm-text")
    expect(confirm).to_contain_text("Vote: Approve “Aml rule failed: transaction ")
    expect(confirm).to_contain_text("” (revision 1)?")
    expect(confirm).not_to_contain_text("completes the quorum")
    assert axe_violations(lena) == []
    expect(progress).to_have_text(
        "0 of 2 approvals — needs 2 more approvals: 1 from finance and 1 from legal"
    )
    lena.keyboard.press("Enter")
    expect(progress).to_have_text("1 of 2 approvals — needs 1 more approval; finance can give it")
    expect(lena.locator(".vote-list")).to_contain_text("lena voted to approve revision 1")
    expect(lena.get_by_role("button", name="Vote: Approve")).to_have_count(0)
    expect(lena.locator(".votes")).to_contain_text("already voted")

    # The inbox row says where the rule stands, in words.
    lena.goto("/console?view=available")
    row = lena.locator(f'tr[data-task-id="{task_id}"]')
    expect(row).to_contain_text(
        "votes: 1 of 2 approvals — needs 1 more approval; finance can give it"
    )
    expect(row.locator(".my-vote")).to_have_text("· you voted to approve")
    assert axe_violations(lena) == []

    # Someone outside both groups reads why they cannot vote.
    oscar = signed_in("oscar", groups=["marketing"], width=width)
    oscar.goto(f"/console/tasks/{task_id}")
    expect(oscar.locator(".votes")).to_contain_text("decided by finance or legal")
    expect(oscar.get_by_role("button", name="Vote: Approve")).to_have_count(0)

    # A rejection without notes is refused in words, keeping the page; then the quorum.
    fiona = signed_in("fiona", groups=["finance"], width=width)
    fiona.goto(f"/console/tasks/{task_id}")
    fiona.get_by_role("button", name="Vote: Reject").click()
    expect(fiona.locator("#vote-error")).to_contain_text("required to reject")
    fiona.get_by_label("Notes").fill("looks right after all")
    fiona.keyboard.press("Escape")  # out of the field: the keys work again
    fiona.keyboard.press("a")
    expect(fiona.locator("#confirm-text")).to_contain_text(
        "This vote completes the quorum: the task is approved."
    )
    fiona.keyboard.press("Enter")
    expect(fiona.locator("#vote-progress")).to_have_text("Approved: 2 of 2 approvals")
    expect(fiona.locator(".vote-list")).to_contain_text("looks right after all")
    assert axe_violations(fiona) == []
    # The first voter sees the outcome on the task page.
    lena.goto(f"/console/tasks/{task_id}")
    expect(lena.locator("#vote-progress")).to_have_text("Approved: 2 of 2 approvals")


def test_a_rejection_from_outside_the_groups_is_said_to_be_no_veto(
    served: Served, signed_in: Any
) -> None:
    oscar = signed_in("oscar", groups=["marketing"])
    task_id = rule_task(served, {"approvals": 2, "groups": {"legal": 1}})
    oscar.goto(f"/console/tasks/{task_id}")
    expect(oscar.locator("#vote-veto-note")).to_contain_text(
        "does not end the vote: at this stage only legal can"
    )
    assert axe_violations(oscar) == []
    oscar.get_by_label("Notes").fill("not convinced")
    oscar.get_by_role("button", name="Vote: Reject").click()
    expect(oscar.locator("#confirm-text")).not_to_contain_text("This vote decides the task")
    oscar.get_by_role("button", name="Confirm").click()
    expect(oscar.locator(".notice")).to_contain_text(
        "recorded as a vote against but does not end the vote"
    )
    expect(oscar.locator("#vote-progress")).to_have_text(
        "0 of 2 approvals — needs 2 more approvals, at least 1 from legal; 1 against"
    )
    assert axe_violations(oscar) == []
