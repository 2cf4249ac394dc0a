"""Reviewers in a real browser against a real ``signoff serve``, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect

SUBJECT: dict[str, Any] = {
    "title": "Quarterly results",
    "body": "Revenue grew 12% year on year, driven by the new payments product. " * 3,
    "figures": {"revenue": 1250000, "growth": 0.12},
    "actions": [{"id": "publish_article"}],
}
SUMMARY = {
    "recommendation": "APPROVE",
    "rationale": "The figures match the ledger export.",
    "generated_by": "summariser-v2",
}
HEADLINE = {
    "title": "Publish “{/title}” to the website",
    "fields": [
        {"label": "Revenue", "pointer": "/figures/revenue", "type": "money", "currency": "EUR"},
        {"label": "Growth", "pointer": "/figures/growth", "type": "text"},
    ],
}
DOCS = Path(__file__).resolve().parents[3] / "docs"


def _task_url(task_id: str) -> str:
    return f"/console/tasks/{task_id}"


def test_two_reviewers_claim_at_once_one_holds_it_the_other_sees_who(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann, bob = signed_in("ann"), signed_in("bob")
    for page in (ann, bob):
        page.goto(_task_url(task_id))
        expect(page.get_by_text("Nobody holds this task.")).to_be_visible()
    # Both click Claim before either answer arrives.
    for page in (ann, bob):
        page.evaluate("document.querySelector('[data-key=c]').click()")
    for page in (ann, bob):
        expect(page.locator("#lease-timer, #notices .notice").first).to_be_visible()
    holders = [p for p in (ann, bob) if p.locator("#lease-timer").count() == 1]
    assert len(holders) == 1
    winner = holders[0]
    loser = bob if winner is ann else ann
    name = "ann" if winner is ann else "bob"
    # Said by the refused claim, or by the live update that may arrive first.
    expect(loser.locator("#notices")).to_contain_text(
        re.compile(f"{name} (has been reviewing this task since|started reviewing it)")
    )
    expect(loser.get_by_text(f"Held by {name}")).to_be_visible()
    expect(loser.get_by_role("button", name="Approve")).to_have_count(0)


def test_inbox_to_a_decision_in_three_keystrokes(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    expect(ann.get_by_role("link", name=re.compile("transaction"))).to_be_visible()
    ann.locator("body").focus()
    ann.keyboard.press("n")  # 1: start reviewing (claim the next task, open it)
    expect(ann.locator("#lease-timer")).to_be_visible()
    assert task_id in ann.url
    ann.keyboard.press("a")  # 2: approve …
    expect(ann.locator("#confirm-text")).to_contain_text("Approve")
    ann.keyboard.press("Enter")  # 3: … confirmed
    expect(ann.get_by_text("Nothing else in this view")).to_be_visible()
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["status"], task["decision"], task["operator_id"]) == (
        "RESOLVED",
        "APPROVED",
        "ann",
    )


def test_a_stray_key_never_decides_and_notes_are_required_to_reject(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(_task_url(task_id))
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    ann.locator("body").focus()
    ann.keyboard.press("r")
    expect(ann.locator("#decide-error")).to_contain_text("Notes are required")
    ann.get_by_label("Notes").fill("the counterparty is sanctioned")
    ann.keyboard.press("a")  # typed into Notes: shortcuts are inactive while typing
    expect(ann.locator("#confirm")).to_be_hidden()
    ann.keyboard.press("Backspace")
    ann.evaluate("document.activeElement.blur()")
    ann.keyboard.press("a")
    expect(ann.locator("#confirm-text")).to_contain_text("Approve")
    ann.keyboard.press("Escape")  # cancelled: nothing was sent
    expect(ann.locator("#confirm")).to_be_hidden()
    ann.get_by_role("button", name="Reject").click()
    ann.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_text("Nothing else in this view")).to_be_visible()
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["decision"], task["notes"]) == ("REJECTED", "the counterparty is sanctioned")


def test_a_new_revision_while_open_shows_the_diff_and_locks_the_old_decision(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT, summary=SUMMARY)
    ann = signed_in("ann")
    ann.goto(_task_url(task_id))
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    expect(ann.get_by_role("region", name="AI recommendation — a person decides")).to_be_visible()
    ann.get_by_label("Notes").fill("checked against the ledger")
    with served.api(producer) as api:
        revised = api.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": SUBJECT | {"title": "Quarterly results (restated)"}},
        )
    assert revised.status_code == 200, revised.text
    notices = ann.locator("#notices")
    expect(notices).to_contain_text("Revision 2 arrived", timeout=40000)
    expect(notices).to_contain_text("changed: Title")
    diff = ann.locator("table.diff")
    expect(diff.locator("ins")).to_have_text("added: (restated)")
    expect(diff).to_contain_text("revision 1 to revision 2")
    approve = ann.get_by_role("button", name="Approve")
    expect(approve).to_be_disabled()
    expect(ann.get_by_label("Notes")).to_have_value("checked against the ledger")
    ann.get_by_role("button", name="I have read revision 2").click()
    expect(approve).to_be_enabled()
    approve.click()
    expect(ann.locator("#confirm-text")).to_contain_text("revision 2")
    ann.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_text("Nothing else in this view")).to_be_visible()
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["decision"], task["approved_revision"]) == ("APPROVED", 2)


@pytest.mark.parametrize("lease_seconds", [6])
def test_the_lease_countdown_lapsing_locks_the_buttons_until_extended(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(_task_url(task_id))
    ann.get_by_role("button", name="Claim").click()
    timer = ann.get_by_role("timer")
    expect(timer).to_be_visible()
    # The lease is shorter than the warning period: the warning is announced at once.
    expect(ann.locator("#lease-warning")).to_contain_text("Your lease lapses in")
    expect(ann.locator("#lease-announce")).to_contain_text("Your lease lapses in")
    expect(ann.locator("#lease-announce")).to_have_attribute("aria-live", "assertive")
    expect(timer).to_have_text("lapsed", timeout=20000)
    expect(ann.get_by_role("button", name="Approve")).to_be_disabled()
    expect(ann.locator("#lease-warning")).to_contain_text("decision buttons are locked")
    ann.get_by_role("button", name="Extend lease").click()
    expect(ann.get_by_text("Lease extended.")).to_be_visible()
    expect(ann.get_by_role("button", name="Approve")).to_be_enabled()


def test_a_supervisor_force_releases_a_lease_and_the_holder_is_told(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann, sue = signed_in("ann"), signed_in("sue", "supervisor")
    ann.goto(_task_url(task_id))
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    sue.goto("/console?view=all")
    expect(sue.get_by_text("held by ann")).to_be_visible()
    sue.goto(_task_url(task_id))
    expect(sue.get_by_text("Held by ann")).to_be_visible()
    sue.get_by_role("button", name="Force release…").click()
    sue.get_by_role("dialog").get_by_role("button", name="Force release").click()
    expect(sue.locator("#notices")).to_contain_text("Force-released the lease held by ann")
    expect(sue.locator("table.history")).to_contain_text("You force-released the lease held by ann")
    # The holder's open page says so at once, and their lease no longer works.
    expect(ann.locator("#notices")).to_contain_text(
        "sue force-released the lease held by ann", timeout=40000
    )
    expect(ann.get_by_role("button", name="Approve")).to_have_count(0)


def test_pages_pass_axe_and_work_at_375_pixels(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(
        producer, subject=SUBJECT, summary=SUMMARY, assigned_group="payments", headline=HEADLINE
    )
    served.escalate(producer)
    ann = signed_in("ann", groups=["payments"])
    login = ann.context.browser.new_page()
    login.goto(served.base_url + "/console/login")
    assert axe_violations(login) == []
    login.close()
    ann.goto("/console")
    assert axe_violations(ann) == []
    ann.goto(_task_url(task_id))
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    assert axe_violations(ann) == []
    if os.environ.get("SIGNOFF_SCREENSHOTS"):  # docs/console-*.png, shown in the README
        ann.set_viewport_size({"width": 1280, "height": 1000})
        ann.screenshot(path=str(DOCS / "console-task.png"))
        soon = (datetime.now(UTC) + timedelta(minutes=25)).isoformat()
        for reason, entity in (("LOW_CONFIDENCE", "order"), ("AML_RULE_FAILED", "payout")):
            served.escalate(producer, reason_code=reason, entity_type=entity, deadline=soon)
        ann.goto("/console")
        ann.screenshot(path=str(DOCS / "console-inbox.png"))
    ann.set_viewport_size({"width": 375, "height": 740})
    ann.goto(_task_url(task_id))
    approve = ann.get_by_role("button", name="Approve")
    expect(approve).to_be_in_viewport()  # the decision stays in reach while reading
    assert _overflowing(ann) == []
    ann.goto("/console")
    assert _overflowing(ann) == []


def _overflowing(page: Any) -> list[str]:
    """Elements reaching past the right edge of the viewport (horizontal scrolling)."""
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
                             && !e.closest('.table-wrap, dialog'))
                .map(e => e.tagName + '.' + e.className + ' '
                          + Math.round(e.getBoundingClientRect().right))
                .slice(0, 10)"""
        )
    )


def test_the_inbox_shows_new_tasks_behind_a_pill_and_keeps_filters_in_the_address(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    served.escalate(producer, reason_code="AML_RULE_FAILED")
    ann = signed_in("ann")
    expect(ann.locator("#rows tr[data-task-id]")).to_have_count(1)
    served.escalate(producer, reason_code="LOW_CONFIDENCE", entity_type="order")
    pill = ann.locator("#new-pill")
    expect(pill).to_have_text("1 new — show", timeout=40000)
    expect(ann.locator("#rows tr[data-task-id]")).to_have_count(1)  # nothing moved yet
    pill.click()
    expect(ann.locator("#rows tr[data-task-id]")).to_have_count(2)
    ann.reload()  # the filters offer the values of the tasks waiting when the page loaded
    ann.locator("body").focus()
    ann.keyboard.press("/")
    expect(ann.get_by_label("Search", exact=True)).to_be_focused()
    ann.get_by_label("Reason code").select_option("LOW_CONFIDENCE")
    ann.get_by_role("button", name="Apply filters").click()
    assert "reason_code=LOW_CONFIDENCE" in ann.url
    expect(ann.locator("#rows tr[data-task-id]")).to_have_count(1)
    expect(ann.locator("#rows")).to_contain_text("order")


def test_a_supervisor_reassigns_several_tasks_at_once(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    ids = [served.escalate(producer) for _ in range(2)]
    served.user("amy", groups=["aml"])  # a group someone is in: a known group
    sue = signed_in("sue", "supervisor")
    sue.goto("/console?view=all")
    for box in sue.get_by_role("checkbox").all():
        box.check()
    sue.get_by_label("Group", exact=True).fill("aml")
    sue.get_by_role("button", name="Reassign").click()
    expect(sue.get_by_text("reassign: 2 of 2 done.")).to_be_visible()
    with served.api(producer) as api:
        assert {api.get(f"/tasks/{i}").json()["assigned_group"] for i in ids} == {"aml"}


def test_a_reviewer_back_on_a_revised_task_sees_the_diff_beside_their_earlier_notes(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT)
    ann = signed_in("ann")
    ann.goto(_task_url(task_id))
    ann.get_by_role("button", name="Claim").click()
    ann.get_by_label("Notes").fill("the title must name the quarter")
    ann.get_by_label("Open the next task after deciding").uncheck()
    ann.get_by_role("button", name="Request revision").click()
    ann.get_by_role("button", name="Confirm").click()
    expect(ann.get_by_text("Decision recorded: REVISION_REQUESTED.")).to_be_visible()
    with served.api(producer) as api:
        revised = api.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": SUBJECT | {"title": "Q3 results"}},
        )
    assert revised.status_code == 200, revised.text
    ann.goto(_task_url(task_id))
    expect(ann.locator(".changed-since")).to_contain_text("revision 1")
    expect(ann.locator("table.diff")).to_contain_text("Q3 results")
    expect(ann.locator(".earlier")).to_contain_text("You asked for a revision on revision 1,")
    expect(ann.locator(".earlier")).to_contain_text("“the title must name the quarter”")


def test_a_refused_decision_shows_why_on_the_page(served: Served, signed_in: Any) -> None:
    """The server answers a refused decision with its status (409 here: a supervisor
    force-released the lease meanwhile, and the page did not hear of it: its live updates
    are cut) and the task as it is now; the page shows it."""
    producer = served.key("producer", "bot")
    supervisor = served.key("supervisor", "sam")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.route("**/console/events*", lambda route: route.abort())
    ann.goto(_task_url(task_id))
    ann.locator("[data-key=c]").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    with served.api(supervisor) as api:
        assert api.post(f"/tasks/{task_id}/force-release").status_code == 200
    ann.locator("#next-toggle").uncheck()
    ann.locator("#notes").fill("The counterparty is sanctioned.")
    with ann.expect_response(re.compile(r"/decide$")) as answer:
        ann.get_by_role("button", name="Reject").click()
        ann.get_by_role("button", name="Confirm").click()
    assert answer.value.status == 409
    refusal = ann.locator('#notices .notice.error[data-error-code="ERR_LEASE_LOST"]')
    expect(refusal).to_be_visible()
    expect(refusal).not_to_contain_text("ERR_")  # the code is for programs, not people
    expect(ann.get_by_text("Nobody holds this task.")).to_be_visible()
    with served.api(producer) as api:
        assert api.get(f"/tasks/{task_id}").json()["decision"] is None
