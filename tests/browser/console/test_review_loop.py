"""A reviewer's shift in a real browser: a reviewing session that goes from decision to
decision by keyboard, the lease countdown to the end, unsent notes kept in the browser,
and the supervisors' force release and reassignment."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations
from tests.browser.console.test_review import SUBJECT, SUMMARY

expect = pytest.importorskip("playwright.sync_api").expect

INBOX = re.compile(r"/console/?(\?.*)?$")


def _task(api: Any, task_id: str) -> dict[str, Any]:
    body: dict[str, Any] = api.get(f"/tasks/{task_id}").json()
    return body


def test_a_reviewer_decides_twenty_tasks_in_a_row_by_keyboard_without_seeing_the_inbox(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    ids = {served.escalate(producer) for _ in range(20)}
    ann = signed_in("ann")
    visited: list[str] = []
    ann.on("framenavigated", lambda frame: visited.append(frame.url))
    ann.locator("body").focus()
    ann.keyboard.press("n")  # start reviewing
    progress = ann.locator("#session-progress")
    expect(progress).to_contain_text("0 decided in this session, 19 waiting")
    visited.clear()
    decided: list[str] = []
    rejected: dict[str, str] = {}
    for number in range(1, 21):
        task_id = ann.url.split("/console/tasks/")[1].split("?")[0]
        assert task_id in ids
        assert task_id not in decided
        if number % 4 == 0:  # reject: r takes the keyboard to the notes; Ctrl+Enter sends
            ann.keyboard.press("r")
            expect(ann.get_by_label("Notes")).to_be_focused()
            expect(ann.locator("#notes-pending")).to_contain_text("then press Enter to confirm")
            notes = f"the counterparty of case {number} is sanctioned"
            ann.keyboard.type(notes)
            ann.keyboard.press("Control+Enter")
            rejected[task_id] = notes
        else:
            ann.keyboard.press("a")
            expect(ann.locator("#confirm-text")).to_contain_text("Approve")
            ann.keyboard.press("Enter")
        decided.append(task_id)
        if number < 20:
            expect(progress).to_contain_text(
                f"{number} decided in this session, {19 - number} waiting"
            )
            expect(ann.locator("#lease-timer")).to_be_visible()  # claimed for them already
    expect(ann.locator("#session-end")).to_contain_text(
        "Nothing else in this view: you decided 20 tasks in this reviewing session."
    )
    assert not [url for url in visited if INBOX.search(url)], visited
    for width in (1280, 375):
        ann.set_viewport_size({"width": width, "height": 800})
        assert axe_violations(ann) == [], width
    with served.api(producer) as api:
        tasks = {task_id: _task(api, task_id) for task_id in ids}
    assert {t["status"] for t in tasks.values()} == {"RESOLVED"}
    assert {t["operator_id"] for t in tasks.values()} == {"ann"}
    for task_id, notes in rejected.items():
        assert (tasks[task_id]["decision"], tasks[task_id]["notes"]) == ("REJECTED", notes)
    assert sum(t["decision"] == "APPROVED" for t in tasks.values()) == 15


def test_a_session_keeps_to_the_inbox_filters_and_stopping_keeps_the_held_task(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    payments = [served.escalate(producer, assigned_group="payments") for _ in range(3)]
    others = [served.escalate(producer) for _ in range(2)]
    ann = signed_in("ann", groups=["payments"])
    ann.goto("/console?view=available&group=payments")
    ann.locator("body").focus()
    ann.keyboard.press("n")
    progress = ann.locator("#session-progress")
    expect(progress).to_contain_text("group payments")
    expect(progress).to_contain_text("0 decided in this session, 2 waiting")
    for width in (375, 1280):
        ann.set_viewport_size({"width": width, "height": 800})
        assert axe_violations(ann) == [], width
    for number in (1, 2):
        assert ann.url.split("/console/tasks/")[1].split("?")[0] in payments
        ann.keyboard.press("a")
        ann.keyboard.press("Enter")
        expect(progress).to_contain_text(f"{number} decided in this session")
    held = ann.url.split("/console/tasks/")[1].split("?")[0]
    assert held in payments
    ann.get_by_role("link", name="Stop reviewing").click()
    stopped = ann.locator("#session-stopped")
    expect(stopped).to_contain_text("You stopped reviewing after deciding 2 tasks")
    expect(stopped).to_contain_text("You still hold this task")
    expect(progress).to_have_count(0)
    with served.api(producer) as api:
        assert (_task(api, held)["status"], _task(api, held)["claimed_by"]) == ("CLAIMED", "ann")
        assert {_task(api, t)["status"] for t in others} == {"PENDING_REVIEW"}
    # Outside the session a decision no longer claims the next one.
    ann.keyboard.press("a")
    ann.keyboard.press("Enter")
    ann.wait_for_url(INBOX)


@pytest.mark.parametrize("lease_seconds", [16])
def test_the_countdown_runs_to_the_end_and_a_lapse_clears_what_held_before(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    ann.get_by_label("Notes").fill("half a thought")
    ann.get_by_role("button", name="Extend lease").click()
    notices = ann.locator("#notices")
    expect(notices).to_contain_text("Lease extended.")
    expect(ann.locator(".meta .status")).to_have_text("claimed")
    warning, announced = ann.locator("#lease-warning"), ann.locator("#lease-announce")
    # Seen: every second, on down below ten seconds (it never stops at the first value).
    expect(warning).to_contain_text(re.compile(r"lapses in 0:0\d"), timeout=30000)
    # Heard: when it starts and at 0:10, not every second.
    expect(announced).to_contain_text("lapses in 0:10", timeout=30000)
    expect(ann.get_by_role("timer")).to_have_text("lapsed", timeout=30000)
    expect(announced).to_contain_text("Your lease lapsed")
    expect(notices).not_to_contain_text("Lease extended.")
    expect(ann.locator(".meta .status")).to_have_text("lease lapsed")
    expect(ann.get_by_label("Notes")).to_have_value("half a thought")
    for width in (1280, 375):
        ann.set_viewport_size({"width": width, "height": 800})
        assert axe_violations(ann) == [], width
    ann.reload()  # the notes are still there after a reload
    expect(ann.get_by_label("Notes")).to_have_value("half a thought")


def test_force_release_asks_first_and_the_holders_notes_survive_it(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann, sue = signed_in("ann"), signed_in("sue", "supervisor")
    ann.goto(f"/console/tasks/{task_id}")
    ann.get_by_role("button", name="Claim").click()
    ann.get_by_label("Notes").fill("the invoice number does not match the order")
    sue.goto(f"/console/tasks/{task_id}")
    opener = sue.get_by_role("button", name="Force release…")
    opener.click()
    dialog = sue.get_by_role("dialog", name="Force release ann's lease?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("ann's lease on this task ends now")
    expect(dialog).to_contain_text("stay in their browser")
    expect(dialog.get_by_role("button", name="Keep the lease")).to_be_focused()
    sue.keyboard.press("Escape")  # changed their mind: nothing happens
    expect(dialog).to_be_hidden()
    with served.api(producer) as api:
        assert _task(api, task_id)["claimed_by"] == "ann"
    opener.focus()
    sue.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    sue.keyboard.press("Shift+Tab")
    expect(dialog.get_by_role("button", name="Force release")).to_be_focused()
    sue.keyboard.press("Enter")
    expect(sue.locator("#notices")).to_contain_text("Force-released the lease held by ann")
    expect(ann.locator("#notices")).to_contain_text("force-released", timeout=40000)
    ann.reload()
    kept = ann.locator("#draft-kept")
    expect(kept).to_contain_text("the invoice number does not match the order")
    ann.get_by_role("button", name="Claim").click()
    expect(ann.get_by_label("Notes")).to_have_value("the invoice number does not match the order")


def test_reassign_offers_the_known_groups_and_refuses_an_unknown_one(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    served.user("eve", groups=["editorial"])
    sue = signed_in("sue", "supervisor")
    sue.goto(f"/console/tasks/{task_id}")
    sue.get_by_text("Supervisor actions").click()
    choice = sue.get_by_label("Group")
    # eve's group, and the groups the default escalation policy notifies.
    expect(choice.locator("option")).to_have_text(
        ["Choose a group", "editorial", "reviewers", "supervisors"]
    )
    # A page's list gone stale, or a hand-made form: the server refuses the group.
    choice.evaluate("s => s.add(new Option('editoral', 'editoral'))")
    choice.select_option("editoral")
    sue.get_by_role("button", name="Reassign").click()
    refusal = sue.locator("#notices .notice.error")
    expect(refusal).to_contain_text("No user, API key or escalation policy names the group")
    expect(refusal).to_have_attribute("data-error-code", "ERR_UNKNOWN_GROUP")
    with served.api() as admin:
        assert _task(admin, task_id)["assigned_group"] is None
        answer = admin.post(f"/tasks/{task_id}/reassign", json={"group": "editoral"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error_code"] == "ERR_UNKNOWN_GROUP"
        assert [e["field"] for e in answer.json()["errors"]] == ["group"]
    sue.get_by_label("Group").select_option("editorial")
    sue.get_by_role("button", name="Reassign").click()
    expect(sue.locator("#notices")).to_contain_text("Reassigned to editorial.")


def test_the_task_page_passes_axe_in_each_state_at_both_widths(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT, summary=SUMMARY)
    ann, sue = signed_in("ann"), signed_in("sue", "supervisor")

    def check(page: Any, state: str) -> None:
        for width in (1280, 375):
            page.set_viewport_size({"width": width, "height": 800})
            assert axe_violations(page) == [], (state, width)

    ann.goto(f"/console/tasks/{task_id}")
    check(ann, "unclaimed")
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    check(ann, "held")
    sue.goto(f"/console/tasks/{task_id}")
    expect(sue.get_by_text("Held by ann")).to_be_visible()
    sue.get_by_role("button", name="Force release…").click()
    check(sue, "supervisor, confirming")
    sue.keyboard.press("Escape")
    check(sue, "supervisor")
    ann.locator("body").focus()
    ann.get_by_role("button", name="Approve").click()
    ann.get_by_role("button", name="Confirm").click()
    ann.wait_for_url(INBOX)  # nothing else to open
    ann.goto(f"/console/tasks/{task_id}")
    expect(ann.locator(".decision")).to_contain_text("APPROVED")
    check(ann, "decided")
